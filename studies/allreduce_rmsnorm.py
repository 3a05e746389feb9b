"""AllReduce + residual + RMSNorm (TensorRT-LLM's fused allreduce pattern): after the
row-parallel MatMul of a tensor-parallel transformer block every rank holds partial sums of the
block's output; AllReduce them, add the residual stream, and RMSNorm the sum for the next
block. The program returns both the normalized rows and the new residual.

Schedules: the program as written is NCCL's AllReduce, the residual kernel and the RMSNorm row
kernel (the mean of squares and the normalization). `rs-c-ag` splits the AllReduce and moves
the residual add and the RMSNorm onto each rank's rows (RMSNorm reduces over the hidden dim, so
a ReduceScatter over rows leaves every row whole on one rank); `fuse-rs-c-ag` runs it all in
one kernel: reduce-scatter of rows by NVLink peer loads, residual add, RMSNorm of each rank's
rows, and both results all-gathered by peer stores (1.5x NCCL's NVLink bytes at P = 2: two
gathered outputs).

`nccl-fuse-c` keeps NCCL's AllReduce and runs the residual add and the RMSNorm in one row
kernel after it: what PyTorch + torch.compile runs, the form to fall back on where no fused
form wins (issue 35).

The schedules beyond CoCoNet (issue 25) fuse the whole AllReduce with the epilogue, without
split: every rank computes the residual and RMSNorm of every row itself, so only the summed
rows cross NVLink. `fuse-ar-c` (two-shot: rows reduce-scattered by peer loads, the summed rows
gathered by peer stores, a barrier, the epilogue on every row; NCCL's bytes, one kernel),
`fuse-ar-c-pipelined` (two-shot's bytes, the epilogue computed by a quarter of the grid as
each row group lands, beside the communication: issue 35),
`fuse-ar-c-oneshot` (every rank loads every peer's whole input: one pass, the form TensorRT-LLM
and vLLM use for small token counts) and `fuse-ar-c-lamport` (one-shot by pushes into poisoned
receive buffers: no barrier; transforms.AllReduceAlgorithm).
"""

from workbench import *
from workbench import ir

T = Size("T", multiple_of=P)  # tokens: batch x sequence
H = Size("H")  # hidden size: each row is normalized whole, so H need not divide by P
sizes = {"T": 8192, "H": 8192}
EPS = 1e-6


def build(dtype=float16, name="allreduce_rmsnorm"):
    """The program in `dtype` (fp16 or bf16) and its schedules."""
    y = Tensor(dtype, [T, H], Local, "y")  # partial sums of the row-parallel MatMul
    r = Tensor(dtype, [T, H], Replicated, "r")  # the residual stream
    g = Tensor(dtype, [H], Replicated, "g")  # RMSNorm's weight
    summed = AllReduce(Sum, y)
    h = Compute(summed + r)  # the new residual
    out = Compute(rms_norm(h, g, EPS))
    program = Program(inputs=[y, r, g], outputs=[out, h], name=name)
    # rms_norm's statistic (the mean of squares), a statement of its own: the schedules move it
    ms = next(s.out.name for s in program.stmts if isinstance(s.op, ir.ReduceAxis))

    @schedule(program)
    def rs_c_ag(s):
        """ReduceScatter of rows, residual + RMSNorm on each rank's rows, two AllGathers."""
        rs, ag = s.split(summed)
        s.reorder(h, ms, out, before=ag)

    @schedule(program)
    def fuse_rs_c_ag(s):
        """rs-c-ag in one kernel: peer loads, residual, RMSNorm per row, two peer-store
        gathers (the normalized rows and the residual)."""
        rs, ag = s.split(summed)
        h_s, ms_s, out_s = s.reorder(h, ms, out, before=ag)
        s.fuse(rs, h_s, ms_s, out_s, h, out)

    @schedule(program)
    def nccl_fuse_c(s):
        """NCCL's AllReduce, then the residual and RMSNorm in one row kernel: the program as
        PyTorch + torch.compile runs it, the form to take where no fused one wins."""
        s.fuse(h, ms, out)

    @schedule(program)
    def fuse_ar_c(s):
        """The whole AllReduce and the epilogue in one kernel (two-shot: NCCL's bytes)."""
        s.fuse(summed, h, ms, out)

    @schedule(program)
    def fuse_ar_c_pipelined(s):
        """Two-shot's bytes with the epilogue beside the communication: a quarter of the grid
        computes each row group as soon as it has landed (large T at P >= 4)."""
        s.allreduce_algorithm(s.fuse(summed, h, ms, out), "pipelined")

    @schedule(program)
    def fuse_ar_c_oneshot(s):
        """One-shot: every rank loads every peer's whole input, one pass over the rows."""
        s.allreduce_algorithm(s.fuse(summed, h, ms, out), "one-shot")

    @schedule(program)
    def fuse_ar_c_lamport(s):
        """One-shot by pushes into poisoned receive buffers: no barrier (small T)."""
        s.allreduce_algorithm(s.fuse(summed, h, ms, out), "lamport")

    return program, [rs_c_ag, fuse_rs_c_ag, nccl_fuse_c, fuse_ar_c, fuse_ar_c_pipelined,
                     fuse_ar_c_oneshot, fuse_ar_c_lamport]

program, schedules = build()
bf16, bf16_schedules = build(bfloat16, name="allreduce_rmsnorm_bf16")
