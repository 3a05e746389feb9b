"""Lowering of the pipeline-parallel step (two stages of P ranks, a Send between them): each
schedule's steps and the stages they run in, the buffers' stages, the chunked fused Send's
index arithmetic, and the faults for what is not generated."""

import re

import pytest
from codegen_cases import ROOT

from codegen.lower import lower, stage_order
from codegen.plan import (
    ChunkedStep,
    KernelStep,
    NcclStep,
    OverlapStep,
    SendStep,
    chunk_rows_fault,
)
from workbench.errors import RuntimeFault
from workbench.loader import load


def _pipeline():
    return load(str(ROOT / "studies/pipeline.py"))


def _plan(schedule, P=2, chunks=4, mode="pull"):
    from studies.pipeline import build

    program, schedules = build(chunks=chunks)
    if schedule is None:
        return lower(program, P, collective_mode=mode)
    return lower(next(s for s in schedules if s.name == schedule).apply(), P,
                 collective_mode=mode)


def _eval_c(text: str, **env) -> int:
    """Evaluate a printed C index expression (64-bit integer arithmetic) in Python."""
    py = re.sub(r"(\d+)LL", r"\1", text).replace("/", "//")
    return eval(py, {}, env)  # noqa: S307 - our own printer's output, in a test


def _buffers(plan):
    return {b.name: (plan.groups[b.group], b.peer) for b in plan.buffers}


def test_stages_in_send_order():
    pf = _pipeline()
    assert [g.name for g in stage_order(pf.program)] == ["stage0", "stage1"]
    plan = lower(pf.program, P=2)
    assert plan.groups == ("stage0", "stage1") and plan.world == 4


def test_single_group_plans_run_every_step_in_group_0():
    plan = lower(load(str(ROOT / "studies/sgd.py")).program, P=2)
    assert plan.groups == ("world",) and plan.world == 2
    assert set(plan.step_groups) == {(0,)} and plan.steps_of(0) == plan.steps
    assert {b.group for b in plan.buffers} == {0}


def test_unscheduled_is_allreduce_epilogue_then_nccl_send():
    plan = _plan(None)
    ar, epilogue, send = plan.steps
    assert plan.step_groups == ((0,), (0,), (0, 1))
    assert isinstance(ar, NcclStep) and ar.op == "all_reduce" and ar.src == ar.dst
    assert isinstance(epilogue, KernelStep) and epilogue.spec.kind == "elementwise"
    assert isinstance(send, SendStep) and (send.src_group, send.dst_group) == (0, 1)
    assert send.src.buffer == "z" and send.dst.buffer == "out" and str(send.count) == "H*T"
    assert _buffers(plan)["out"] == ("stage1", False)
    assert {"y", "b", "r", "z"} <= {n for n, (g, _) in _buffers(plan).items() if g == "stage0"}
    assert plan.steps_of(1) == (send,)


def test_rs_c_send_ag_sends_slices_through_nccl():
    plan = _plan("rs-c-send-ag")
    rs, epilogue, send, ag = plan.steps
    assert plan.step_groups == ((0,), (0,), (0, 1), (1,))
    assert (rs.op, ag.op) == ("reduce_scatter", "all_gather")
    assert isinstance(send, SendStep) and str(send.count) == "H*T/2"
    assert ag.src.buffer == send.dst.buffer == "out_s"
    assert _buffers(plan)["out"] == ("stage1", False)


@pytest.mark.parametrize("mode", ["pull", "push"])
def test_fuse_rs_c_send_ag_is_one_kernel_then_wait_and_allgather(mode):
    plan = _plan("fuse-rs-c-send-ag", P=4, mode=mode)
    kernel, wait, ag = plan.steps
    assert plan.step_groups == ((0,), (1,), (1,))
    assert kernel.spec.kind == "send" and kernel.stmts == ("summed_rs", "z_s", "out_s")
    assert wait.spec.kind == "wait" and isinstance(ag, NcclStep) and ag.op == "all_gather"
    kinds = {p.name: (p.kind, p.ref, p.index) for p in kernel.spec.params}
    # The Send stores through this local rank's pointer into stage 1's buffer; the flag lives
    # with the receiver, the ack and the block counter with the sender.
    assert kinds["p_out_s_remote"] == ("remote", "out_s", 1)
    assert kinds["sendflags"] == ("remote", "sendflags_out_s", 1)
    assert kinds["sendack"][:2] == ("buf", "sendack_out_s")
    assert kinds["flags3"] == ("flags", "flags_summed_rs", 3)
    waits = {p.name: (p.kind, p.ref, p.index) for p in wait.spec.params}
    assert waits["sendack"] == ("remote", "sendack_out_s", 0)
    assert waits["sendflags"][:2] == ("buf", "sendflags_out_s")
    b = _buffers(plan)
    assert b["out_s"] == ("stage1", True) and b["sendflags_out_s"] == ("stage1", True)
    assert b["sendack_out_s"] == ("stage0", True) and b["sendcount_out_s"] == ("stage0", False)
    assert b["flags_summed_rs"][0] == "stage0"


def test_fuse_c_send_overlap_ar_overlaps_nccl_chunks_with_the_fused_send():
    plan = _plan("fuse-c-send-overlap-ar", chunks=4)
    overlap, waits = plan.steps
    assert plan.step_groups == ((0,), (1,))
    assert isinstance(overlap, OverlapStep) and overlap.chunks == 4
    assert isinstance(overlap.producer, NcclStep) and overlap.producer.op == "all_reduce"
    assert overlap.consumer.spec.kind == "send"
    assert (str(overlap.rows), overlap.per) == ("T", 4)
    assert isinstance(waits, ChunkedStep) and waits.chunks == 4
    assert [s.spec.kind for s in waits.steps] == ["wait"]


@pytest.mark.parametrize("P,chunks", [(2, 4), (1, 2), (4, 2)])
def test_chunked_send_of_whole_tensors_tiles_every_element_once(P, chunks):
    """fuse-c-send-overlap-ar: over the chunks, every rank reads each element of the
    all-reduced tensor once and stores it at the same index of the receiver's buffer; the
    dropout mask is indexed by that same whole-tensor index."""
    plan = _plan("fuse-c-send-overlap-ar", P=P, chunks=chunks)
    spec = plan.steps[0].consumer.spec
    T, H = 4 * chunks, 12
    extent = _eval_c(spec.extent, T=T, H=H)
    assert extent * chunks == T * H
    (summed,) = [ld for ld in spec.loads if ld.var == "a_summed"]
    (store,) = spec.stores
    seen = []
    for c in range(chunks):
        for rank in range(P):
            read = _eval_c(summed.offset, T=T, H=H, chunk=c, rank=rank)
            assert read == _eval_c(store.offset, T=T, H=H, chunk=c, rank=rank) == c * extent
            seen.append(read)
    # The dropout mask's index is the whole-tensor index of the element: chunk offset + e.
    assert f"static_cast<unsigned long long>({summed.offset} + e)" in spec.assigns[0].expr
    assert sorted(set(seen)) == [c * extent for c in range(chunks)]


@pytest.mark.parametrize("P,chunks,mode", [(2, 4, "pull"), (4, 2, "push"), (1, 4, "pull")])
def test_chunked_send_of_slices_tiles_and_gathers_every_element_once(P, chunks, mode):
    """overlap-fuse-rs-c-send-ag: launch (chunk c, rank r) reduces whole-tensor part c*P + r
    and stores it at c * extent of the receiver's slice buffer; the receiver's AllGather of
    chunk c (count extent, destination offset c * P * extent) puts rank r's part back at
    whole-tensor part c*P + r: every element lands where the interpreter has it."""
    plan = _plan("overlap-fuse-rs-c-send-ag", P=P, chunks=chunks, mode=mode)
    sender, receiver = plan.steps
    assert plan.step_groups == ((0,), (1,))
    assert isinstance(sender, ChunkedStep) and isinstance(receiver, ChunkedStep)
    (kernel,) = sender.steps
    wait, gather = receiver.steps
    assert wait.spec.kind == "wait" and gather.op == "all_gather"
    assert (str(sender.rows), sender.per) == ("T", chunks * P)
    spec = kernel.spec
    T, H = 2 * P * chunks, 12
    extent = _eval_c(spec.extent, T=T, H=H)
    assert extent * P * chunks == T * H
    (store,) = spec.stores
    r_load = next(ld for ld in spec.loads if ld.var == "a_r")
    landed = []
    for c in range(chunks):
        for rank in range(P):
            part = _eval_c(r_load.offset, T=T, H=H, chunk=c, rank=rank)
            assert part == (c * P + rank) * extent
            local = _eval_c(store.offset, T=T, H=H, chunk=c, rank=rank)
            assert local == c * extent
            # The AllGather of chunk c: rank r's count-`extent` contribution at destination
            # offset c * P * extent + r * extent.
            landed.append(c * P * extent + rank * extent)
            assert landed[-1] == part
    assert sorted(landed) == [k * extent for k in range(P * chunks)]
    if mode == "pull":
        (reduce,) = [ld for ld in spec.loads if ld.mode == "reduce"]
        assert all(f"({r_load.offset})" in p for p in reduce.peers)


def test_chunk_rows_must_divide():
    assert chunk_rows_fault("x", 16, 8, 4) is None
    assert chunk_rows_fault("out_s", 12, 8, 4) == (
        "statement out_s: the 12 rows must be a multiple of chunks x ranks = 8 to run in 4 "
        "chunks; pick sizes that divide, or a chunk count that divides them")
    assert "multiple of chunks = 4 to run in 4 chunks" in chunk_rows_fault("out", 6, 4, 4)


def test_a_computation_on_what_was_received_runs_in_the_next_stage():
    from workbench import (
        AllReduce,
        Compute,
        Local,
        Pipeline,
        Send,
        Size,
        Stage,
        Sum,
        Tensor,
        float32,
    )
    from workbench.types import P

    T = Size("T", multiple_of=P)
    s0, s1 = Stage("a"), Stage("b")
    y = Tensor(float32, [T], Local, "y", group=s0)
    out = Send(AllReduce(Sum, y), s1)
    z = Compute(out * 2.0)
    program = Pipeline([s0, s1], inputs=[y], outputs=[z], name="p")
    plan = lower(program, P=2)
    assert [type(s).__name__ for s in plan.steps] == ["NcclStep", "SendStep", "KernelStep"]
    assert plan.step_groups == ((0,), (0, 1), (1,))


def test_an_overlapped_send_of_slices_read_elsewhere_is_a_clear_fault():
    """Chunk c's part lands at c * extent of the receiver's slice buffer (chunk order, not the
    slice's row order): only the AllGather overlapped with it may read it."""
    from studies.pipeline import build

    _, schedules = build(chunks=4)
    p = next(s for s in schedules if s.name == "overlap-fuse-rs-c-send-ag").apply()
    p = p.with_stmts(p.stmts, outputs=[p.value("out_s"), p.value("out")])
    with pytest.raises(RuntimeFault, match=r"^statement summed_rs,z_s,out_s \(FusedSend\): an "
                                           r"overlapped Send of slices leaves its parts in "
                                           r"chunk order, so only an AllGather in the same "
                                           r"overlap may read 'out_s', got other uses; overlap "
                                           r"it with its AllGather$"):
        lower(p, P=2)
