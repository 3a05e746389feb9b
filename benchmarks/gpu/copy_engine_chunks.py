"""Data-parallel Adam (studies/adam.py) with its fused collective moved by copy engines in 4,
8, 16 and 32 pieces per slice (`fuse-rs-c-ag-ce` is 8; GPU run 16 measured the studies with
it, before it left the studies' schedule lists for being no faster than the SMs): how the
pieces trade the pipeline's fill against per-piece costs. A benchmark program for
compile-and-measure and simulate, not a study:

    workbench compile-and-measure benchmarks/gpu/copy_engine_chunks.py --gpus 2 --set N=2**28
"""

from studies.adam import build
from workbench import schedule

program, _ = build()
g1 = next(s for s in program.stmts if s.name == "g1")
updates = [s for s in program.stmts if s.name in ("m1", "v1", "w1")]
m, v = (x for x in program.inputs if x.name in ("m", "v"))
sizes = {"N": 2**28}


def _copy_engines(chunks: int):
    def fuse_ce(s):
        rs, ag = s.split(g1.out.name)
        sliced = s.reorder(*[u.out.name for u in updates], before=ag)
        s.as_slice(m.name, v.name)
        s.copy_engines(s.fuse(rs, *sliced, "w1"), chunks=chunks)

    fuse_ce.__name__ = "fuse_rs_c_ag_ce" + ("" if chunks == 8 else str(chunks))
    fuse_ce.__doc__ = f"fuse-rs-c-ag with copy engines, {chunks} pieces per slice."
    return schedule(program)(fuse_ce)


schedules = [_copy_engines(c) for c in (4, 8, 16, 32)]
