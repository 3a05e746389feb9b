"""Programs whose schedules the simulator prices but the GPU backend does not generate yet
(issues 22 and 24): an amax (ReduceTensor) fused into a collective, an overlapped fused
collective whose body holds LayerNorm's statistics (ReduceAxis), and compute overlapped with a
Broadcast (a parameter server's overlap-c-bcast). `workbench simulate` shows each as a row with
its reason, never best (tests/cli/test_simulate_generated.py); when codegen learns one, that
test says so."""

from studies import parameter_server
from workbench import *
from workbench import ir

N = Size("N", multiple_of=P)
T = Size("T", multiple_of=P)
H = Size("H", multiple_of=P)
sizes = {"N": 2**20, "T": 1024, "H": 1024}

# 1. amax-scaled cast: the AllReduce's result scaled by its amax, fused into one collective
g = Tensor(float32, [N], Local, "g")
summed = AllReduce(Sum, g)
amax = ReduceTensor(Max, abs(summed))
scaled = Compute(summed / amax)
amax_scale = Program(inputs=[g], outputs=[scaled], name="amax_scale")

absolute = [st.out.name for st in amax_scale.stmts][1]  # abs(summed), a statement of its own

@schedule(amax_scale)
def fuse_amax(s):
    rs, ag = s.split(summed)
    moved = s.reorder(absolute, amax, scaled, before=ag)
    s.fuse(rs, *moved, scaled)

# 2. row-parallel MatMul, AllReduce + residual + LayerNorm, overlapped
x = Tensor(float16, [T, H], Sliced(1), "x")
W = Tensor(float16, [H, H], Sliced(0), "W")
r = Tensor(float16, [T, H], Replicated, "r")
gw = Tensor(float16, [H], Replicated, "gw")
gb = Tensor(float16, [H], Replicated, "gb")
y = MatMul(x, W)
ysum = AllReduce(Sum, y)
h = Compute(ysum + r)
out = Compute(layer_norm(h, gw, gb))
mm_layernorm = Program(inputs=[x, W, r, gw, gb], outputs=[out, h], name="mm_layernorm")
hidden = [st.out.name for st in mm_layernorm.stmts if isinstance(st.op, ir.ReduceAxis)]

@schedule(mm_layernorm)
def overlap_fused_ln(s):
    rs, ag = s.split(ysum)
    moved = s.reorder(h, *hidden, out, before=ag)
    f = s.fuse(rs, *moved, h, out)
    s.overlap(y, f, chunks=2)

# 3. the parameter server study's update overlapped with its Broadcast
param_server = parameter_server.program


@schedule(param_server)
def overlap_c_bcast(s):
    s.overlap("w1", "w2", chunks=2)


program = amax_scale  # the default of the file
