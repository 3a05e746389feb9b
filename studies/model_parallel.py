"""Megatron-style model-parallel layer (CoCoNet Figure 11): the row-parallel MatMul of a
transformer block leaves partial sums on every rank; AllReduce them, then add the bias, apply
dropout and add the residual.

Schedules: the program as written is MatMul, AllReduce, then the epilogue kernel;
`fuse-ar-c` runs the epilogue on slices inside a FusedAllReduce; `overlap-mm-fuse-ar-c` also
overlaps the MatMul with that fused collective, chunk by chunk.
"""

from workbench import *

T = Size("T", multiple_of=P)  # tokens: batch x sequence (Megatron splits them too)
H = Size("H", multiple_of=P)  # hidden size
sizes = {"T": 8192, "H": 12288}


def build(dtype=float16, chunks=4, dropout=0.1, name="model_parallel"):
    """The layer and its schedules; `dropout=None` leaves dropout out (a training layer:
    the program fixes the mask's seed, and the same mask every step would not be dropout)."""
    x = Tensor(dtype, [T, H], Sliced(1), "x")  # activations, column-sliced by the layer before
    W = Tensor(dtype, [H, H], Sliced(0), "W")  # row-parallel weight
    b = Tensor(dtype, [H], Replicated, "b")
    r = Tensor(dtype, [T, H], Replicated, "r")  # residual
    y = MatMul(x, W)
    summed = AllReduce(Sum, y)
    biased = summed + b
    out = Compute((biased if dropout is None else Dropout(biased, dropout)) + r)
    program = Program(inputs=[x, W, b, r], outputs=[out], name=name)

    @schedule(program)
    def fuse_ar_c(s):
        """bias + dropout + residual on slices inside one FusedAllReduce."""
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
