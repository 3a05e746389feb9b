"""The whole AllReduce fused with the row computation (issue 25, codegen.lower_rows): one
kernel per algorithm, its buffers, barriers and launch counter, and the pinned refusals."""

import pytest

from codegen.lower import lower
from codegen.plan import KernelStep
from codegen.render import render
from workbench import AllReduce, Local, Max, Program, Replicated, Size, Tensor, float16, rms_norm
from workbench.errors import RuntimeFault
from workbench.transforms import AllReduceAlgorithm, Fuse


def _step(f, name, P):
    plan = lower(f.schedules[name].apply(), P=P)
    (step,) = plan.steps
    assert isinstance(step, KernelStep) and step.spec.kind == "collective"
    return plan, step


@pytest.mark.parametrize("P", [1, 2, 4])
def test_two_shot_gathers_the_summed_rows_once_and_barriers_twice(study, P):
    f = study("studies/allreduce_rmsnorm.py")
    plan, step = _step(f, "fuse-ar-c", P)
    ar = step.spec.allreduce
    assert ar.algorithm == "two-shot" and len(ar.src_peers) == P and len(ar.dst_peers) == P
    bufs = {b.name: b for b in plan.buffers}
    assert bufs["ar_summed"].peer and bufs["ar_summed"].dtype == "f16"
    assert not bufs["launches_summed"].peer and bufs["launches_summed"].dtype == "u32"
    # the passes read the summed rows from this rank's buffer, never from peers
    assert [ld.mode for ld in step.spec.row.passes[0].loads] == ["contig", "contig"]
    assert step.spec.row.rows == "T"  # every row, on every rank
    cu = render(step.spec)
    assert cu.count("wb::block_barrier") == 2 and "uint32_t epoch)" not in cu
    assert "wb::launch_epoch(launches)" in cu and "wb::launch_done(launches)" in cu
    # the outputs are written on this rank only: no peer stores of out or h
    assert all(not s.peers for p in step.spec.row.passes for s in p.stores)


def test_one_shot_reduces_every_row_from_every_peer(study):
    f = study("studies/allreduce_rmsnorm.py")
    _, step = _step(f, "fuse-ar-c-oneshot", 4)
    first = step.spec.row.passes[0]
    (red,) = [ld for ld in first.loads if ld.mode == "reduce"]
    assert len(red.peers) == 4
    assert render(step.spec).count("wb::block_barrier") == 2


@pytest.mark.parametrize("P", [1, 2])
def test_lamport_has_no_flags_and_three_rotating_receive_buffers(study, P):
    f = study("studies/allreduce_rmsnorm.py:bf16")
    plan, step = _step(f, "fuse-ar-c-lamport", P)
    assert step.flags == "" and not any(p.kind in ("flags", "epoch") for p in step.spec.params)
    bufs = {b.name: b for b in plan.buffers}
    lam = bufs["lamport_summed"]
    # u32 so that the runtime zeroes it (the poison) and the checks never NaN-fill it
    assert lam.peer and lam.dtype == "u32"
    assert int(lam.numel.subs({s: 8 for s in lam.numel.free_symbols})) == 3 * P * 64 * 2 // 4
    cu = render(step.spec)
    assert "block_barrier" not in cu
    assert cu.count("wb::lamport_load<V>") == P and cu.count("wb::lamport_store<V>") == P
    assert "((epoch + 2u) % 3u)" in cu  # re-poisons the buffer of two launches ahead


@pytest.mark.parametrize("P", [1, 2, 4, 8])
def test_pipelined_moves_two_shots_bytes_and_flags_each_row_group(study, P):
    """The pipelined form (issue 35): two-shot's buffers and peer pointers, one start barrier
    and no second one, arrival flags of P owners x PIPELINE_GROUPS groups x MAX_BLOCKS moving
    blocks on every rank, each set by block_signal and spun on by wait_entries."""
    from codegen.lower_rows import PIPELINE_GROUPS
    from codegen.plan import MAX_BLOCKS

    f = study("studies/allreduce_rmsnorm.py")
    plan, step = _step(f, "fuse-ar-c-pipelined", P)
    ar = step.spec.allreduce
    assert ar.algorithm == "pipelined" and ar.groups == PIPELINE_GROUPS
    assert len(ar.src_peers) == len(ar.dst_peers) == len(ar.ready_peers) == P
    bufs = {b.name: b for b in plan.buffers}
    assert bufs["ar_summed"].peer and bufs["ready_summed"].peer
    assert bufs["ready_summed"].dtype == "u32"
    assert int(bufs["ready_summed"].numel) == P * PIPELINE_GROUPS * MAX_BLOCKS
    cu = render(step.spec)
    assert cu.count("wb::block_barrier") == 1  # the start; the flags replace the second
    # the vector and the scalar path each signal and wait once per row group
    assert cu.count(f"wb::block_signal<{P}>(ready,") == 2 and cu.count("wb::wait_entries(") == 2
    assert "computing_blocks = gridDim.x / 2 > 0" in cu  # the default share, a half


def test_pipelined_refuses_what_cannot_hold_both_kinds_of_blocks(study):
    from workbench.options import CodegenOptions

    f = study("studies/allreduce_rmsnorm.py")
    prog = f.schedules["fuse-ar-c-pipelined"].apply()
    for opts, why in ((CodegenOptions(row_grid="rows"), r"must run on a resident grid, got "
                       r"row_grid 'rows'.*use 'two-shot'"),
                      (CodegenOptions(collective_grid=1), r"must have at least 2 blocks \(one "
                       r"moving, one computing\), got collective_grid 1")):
        with pytest.raises(RuntimeFault, match=why):
            lower(prog, P=4, options=opts)
    lower(prog, P=4, options=CodegenOptions(collective_grid=2))  # two blocks are enough


def test_two_shot_and_lamport_refuse_a_max_allreduce():
    """A fused AllReduce(Max) is one-shot from the fuse (issue 39: the autotuner proposed
    two-shot ones that lowering refused); asking for a summing algorithm is refused by the
    transform, and lowering still refuses a region built so by hand."""
    from dataclasses import replace

    from workbench.errors import IllegalTransform

    T, H = Size("T"), Size("H")
    y = Tensor(float16, [T, H], Local, "y")
    g = Tensor(float16, [H], Replicated, "g")
    s = AllReduce(Max, y)
    prog = Program([y, g], [rms_norm(s, g)], name="maxnorm")
    one = Fuse(tuple(st.out.name for st in prog.stmts)).apply(prog)
    region = one.stmts[0].outs[0].name
    assert one.stmts[0].op.algorithm == "one-shot"
    for algorithm in ("two-shot", "pipelined", "lamport"):
        with pytest.raises(IllegalTransform, match=rf"a {algorithm} fused AllReduce must sum, "
                           r"got Max; use 'one-shot'"):
            AllReduceAlgorithm(region, algorithm).apply(one)
    two = one.with_stmts([replace(one.stmts[0], op=replace(one.stmts[0].op,
                                                           algorithm="two-shot"))])
    with pytest.raises(RuntimeFault, match=r"a two-shot fused AllReduce must sum, got Max; use "
                                           r"one-shot \(s.allreduce_algorithm\(region, "
                                           r"\"one-shot\"\)\)"):
        lower(two, P=2)
    (step,) = lower(one, P=2).steps
    assert [ld.reduce for ld in step.spec.row.passes[0].loads if ld.mode == "reduce"] == ["max"]
