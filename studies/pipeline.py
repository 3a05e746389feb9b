"""Pipeline-parallel step (CoCoNet Figure 12): the last layer of a stage all-reduces its
partial sums within the stage's model-parallel group, adds bias, dropout and residual, and
sends the activations to the same rank of the next stage.

Schedules: `fuse-c-send-overlap-ar` fuses the epilogue into the Send and overlaps it with the
AllReduce; `rs-c-send-ag` sends only each rank's slice across stages and gathers on the other
side (1/P of the inter-stage bytes per rank); `fuse-rs-c-send-ag` fuses ReduceScatter, epilogue
and Send into one kernel; `overlap-fuse-rs-c-send-ag` also overlaps it with the receiving
stage's AllGather (CoCoNet's best schedule).
"""

from workbench import *

T = Size("T", multiple_of=P)
H = Size("H", multiple_of=P)
sizes = {"T": 8192, "H": 12288}
stage0, stage1 = Stage("stage0"), Stage("stage1")


def build(dtype=float16, chunks=4):
    y = Tensor(dtype, [T, H], Local, "y", group=stage0)  # partial sums of a row-parallel MatMul
    b = Tensor(dtype, [H], Replicated, "b", group=stage0)
    r = Tensor(dtype, [T, H], Replicated, "r", group=stage0)
    summed = AllReduce(Sum, y)
    z = Compute(Dropout(summed + b, 0.1) + r)
    out = Send(z, stage1)
    program = Pipeline([stage0, stage1], inputs=[y, b, r], outputs=[out], name="pipeline")

    @schedule(program)
    def fuse_c_send_overlap_ar(s):
        """The epilogue fused into the Send, overlapped with the AllReduce chunk by chunk."""
        s.fuse(z, out)
        s.overlap(summed, z, chunks=chunks)

    @schedule(program)
    def rs_c_send_ag(s):
        """Slices cross the stage boundary; the next stage gathers them."""
        rs, ag = s.split(summed)
        (z_s,) = s.reorder(z, before=ag)
        s.reorder(out, before=z)

    @schedule(program)
    def fuse_rs_c_send_ag(s):
        """ReduceScatter, epilogue and Send of the slice in one kernel; AllGather after."""
        rs, ag = s.split(summed)
        (z_s,) = s.reorder(z, before=ag)
        (out_s,) = s.reorder(out, before=z)
        s.fuse(rs, z_s, out_s)

    @schedule(program)
    def overlap_fuse_rs_c_send_ag(s):
        """fuse-rs-c-send-ag overlapped with the receiving stage's AllGather."""
        rs, ag = s.split(summed)
        (z_s,) = s.reorder(z, before=ag)
        (out_s,) = s.reorder(out, before=z)
        s.fuse(rs, z_s, out_s)
        s.overlap(out_s, out, chunks=chunks)

    return program, [fuse_c_send_overlap_ar, rs_c_send_ag, fuse_rs_c_send_ag,
                     overlap_fuse_rs_c_send_ag]


program, schedules = build()
