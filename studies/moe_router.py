"""An MoE router (Mixtral's top-2 of 8 experts) on P GPUs, data-parallel over tokens: each rank
scores its own tokens against the replicated router weights, picks each token's top-k experts
and renormalises their gates, and the ranks all-gather every token's route (Megatron's
all-gather token dispatcher: every expert's rank then picks the tokens routed to it).

    logits = x @ Wg                         [T, 8] Sliced(0): each rank's tokens
    probs = softmax(logits)                 a row kernel
    gate, expert = TopK(probs, 2)           [T, 2] values and int32 expert indices
    weights = gate / sum(gate)              Mixtral's renormalised gates
    AllGather(weights), AllGather(expert)   every token's route on every rank

The gathered `expert` is what an MoE's dispatch reads (studies/moe.py exchanges the tokens
grouped by expert with a fixed capacity). Schedules: `fuse-softmax` runs the softmax's
statements as one row kernel, `fuse-gates-ag` the gates' renormalisation and their all-gather
as one kernel (peer stores: no NCCL call for the gates), `fuse-both` both. TopK is its own
kernel, a warp a row (design decision 106).
"""

from workbench import *

T = Size("T", multiple_of=P)  # tokens
H = Size("H")  # hidden size
EXPERTS, K = 8, 2
sizes = {"T": 16384, "H": 4096}


def build(dtype=bfloat16, name="moe_router"):
    x = Tensor(dtype, [T, H], Sliced(0), "x")  # each rank's tokens
    Wg = Tensor(dtype, [H, EXPERTS], Replicated, "Wg")  # the router
    logits = MatMul(x, Wg)
    probs = softmax(Cast(float32, logits))
    gate, expert = TopK(probs, K, name="gate")
    weights = Compute(gate / ReduceTensor(Sum, gate, axis=-1))
    routes = AllGather(weights)
    experts = AllGather(expert)
    program = Program(inputs=[x, Wg], outputs=[routes, experts], name=name)

    @schedule(program)
    def fuse_softmax(s):
        """The softmax's max, sum and division as one row kernel."""
        s.fuse("t0", "t1", probs)

    @schedule(program)
    def fuse_gates_ag(s):
        """The gates' renormalisation and their all-gather as one kernel (a row kernel that
        stores each rank's rows into every peer's buffer): no NCCL call for the gates."""
        s.fuse("t2", weights, routes)

    @schedule(program)
    def fuse_both(s):
        """Both fusions."""
        s.fuse("t0", "t1", probs)
        s.fuse("t2", weights, routes)

    return program, [fuse_softmax, fuse_gates_ag, fuse_both]


program, schedules = build()
