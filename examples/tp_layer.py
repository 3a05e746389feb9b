"""The model-parallel study's layer (studies/model_parallel.py) as a training layer uses it:
a row-parallel MatMul, AllReduce of the partial sums, bias and residual; without the study's
dropout, whose mask is fixed by a seed in the program (the same mask every step would not be
dropout), and in the dtype of the model (fp32 by default). The schedules are the study's:
`fuse-ar-c` (the epilogue on slices inside a FusedAllReduce) and `overlap-mm-fuse-ar-c` (that,
overlapped chunk by chunk with the MatMul). wbtorch.tp.RowParallelLinear runs it."""

from workbench import *

T = Size("T", multiple_of=P)  # tokens
H = Size("H", multiple_of=P)  # hidden size
sizes = {"T": 2048, "H": 256}


def build(dtype=float32, chunks=4):
    x = Tensor(dtype, [T, H], Sliced(1), "x")  # this rank's columns of the activations
    W = Tensor(dtype, [H, H], Sliced(0), "W")  # this rank's rows of the weight (in x out)
    b = Tensor(dtype, [H], Replicated, "b")
    r = Tensor(dtype, [T, H], Replicated, "r")  # residual
    y = MatMul(x, W)
    summed = AllReduce(Sum, y)
    out = Compute(summed + b + r)
    program = Program(inputs=[x, W, b, r], outputs=[out], name="tp_linear")

    @schedule(program)
    def fuse_ar_c(s):
        """bias + residual on slices inside one FusedAllReduce."""
        rs, ag = s.split(summed)
        (out_s,) = s.reorder(out, before=ag)
        s.fuse(rs, out_s, out)

    @schedule(program)
    def overlap_mm_fuse_ar_c(s):
        """fuse-ar-c, with the MatMul overlapped chunk by chunk with the fused collective."""
        rs, ag = s.split(summed)
        (out_s,) = s.reorder(out, before=ag)
        s.fuse(rs, out_s, out)
        s.overlap(y, rs, chunks=chunks)

    return program, [fuse_ar_c, overlap_mm_fuse_ar_c]


program, schedules = build()
f16, f16_schedules = build(float16)
