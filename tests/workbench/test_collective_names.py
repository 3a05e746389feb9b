"""Every collective has one entry in one name table (ir.COLLECTIVES, design note 96): its IR
class, the workbench's kind (Fused kinds, the cost model, calibration) and NCCL's function (the
plan, the generated sources' comments, the runtime's calls); every reader takes its names and
its buffer convention from there."""

from codegen.lower import lower
from codegen.plan import NcclStep
from cost_model import collectives
from cost_model.calibration import KINDS
from cost_model.ops.comm import COLLECTIVE_KINDS, collective_kind
from workbench import ir
from workbench.runtime import chunked, comm


def test_one_entry_per_collective_class_and_unique_names():
    ops = [c.op for c in ir.COLLECTIVES]
    assert set(ops) == set(ir.COMMUNICATION_OPS) - {ir.Send}
    assert len({c.kind for c in ir.COLLECTIVES}) == len({c.nccl for c in ir.COLLECTIVES}) == 6
    for c in ir.COLLECTIVES:
        assert ir.collective_of(c.op) is c and ir.collective_named(c.nccl) is c


def test_every_reader_takes_its_names_from_the_table():
    kinds = {c.op: c.kind for c in ir.COLLECTIVES}
    # the cost model prices NCCL's ring/tree collectives by these kinds (AllToAll apart)
    assert COLLECTIVE_KINDS == {op: k for op, k in kinds.items() if op is not ir.AllToAll}
    assert collectives.COLLECTIVES == tuple(COLLECTIVE_KINDS.values())
    assert collective_kind(ir.AllGather("x")) == "allgather"
    # a Fused region named by one collective has that collective's kind
    assert set(kinds.values()) <= set(ir.FUSED_KINDS)
    assert set(KINDS) <= set(kinds.values())  # the calibration tables' columns
    # the runtime's NCCL calls
    assert comm.NCCL_OPS == tuple(c.nccl for c in ir.COLLECTIVES)


def test_the_buffer_convention_is_the_tables():
    rs, ag, ar = (ir.collective_of(op) for op in (ir.ReduceScatter, ir.AllGather, ir.AllReduce))
    assert rs.counts(8, 4) == (32, 8) and ag.counts(8, 4) == (8, 32) and ar.counts(8, 4) == (8, 8)
    for c in ir.COLLECTIVES:
        assert comm.element_counts(c.nccl, 8, 4) == c.counts(8, 4)
        src, dst, count = chunked.nccl_chunk(c.nccl, 0, 0, 8, "f32", 1, 2, 4)
        mul_src, mul_dst = c.counts(1, 4)
        assert (src, dst, count) == (4 * 4 * mul_src, 4 * 4 * mul_dst, 4)


def test_lowering_names_each_nccl_call_from_the_table():
    """studies' unscheduled programs lower every plain collective to an NcclStep whose op is
    its class's NCCL name."""
    from conftest import ROOT

    from workbench.loader import load

    seen = set()
    for study in ("adam.py", "parameter_server.py", "moe.py", "allreduce.py"):
        loaded = load(str(ROOT / "studies" / study))
        programs = [loaded.program] + [s.apply() for n, s in loaded.schedules.items()
                                       if n in ("rs-c-ag", "reduce-c-broadcast")]
        for program in programs:
            leaves = {s.name: s for t in program.stmts for s in t.leaves()}
            for step in lower(program, 4).steps:
                if isinstance(step, NcclStep) and step.stmt in leaves:
                    op = leaves[step.stmt].op
                    assert step.op == ir.collective_of(op).nccl
                    assert step.collective is ir.collective_of(op)
                    seen.add(type(op))
    assert {ir.AllReduce, ir.ReduceScatter, ir.AllGather, ir.AllToAll} <= seen
