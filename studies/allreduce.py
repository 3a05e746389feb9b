"""AllReduce alone (no computation): the fused AllReduce kernel against NCCL's all_reduce.

`fused` is ReduceScatter + AllGather in one kernel of peer loads and stores over NVLink.
"""

from workbench import AllReduce, Local, P, Program, Size, Sum, Tensor, float32, schedule

N = Size("N", multiple_of=P)
sizes = {"N": 2**26}


def build(dtype=float32):
    g = Tensor(dtype, [N], Local, "g")
    g1 = AllReduce(Sum, g)
    program = Program(inputs=[g], outputs=[g1], name="allreduce")

    @schedule(program)
    def fused(s):
        """ReduceScatter + AllGather as one FusedAllReduce kernel."""
        rs, ag = s.split(g1)
        s.fuse(rs, ag)

    return program, [fused]


program, schedules = build()
