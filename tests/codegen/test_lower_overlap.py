"""Lowering of MatMul and of Overlapped(MatMul, consumer) (the model-parallel step): the plan's
steps, the chunked kernel's index arithmetic, and the faults for what is not generated."""

import re

import pytest
from codegen_cases import ROOT

from codegen.lower import lower
from codegen.plan import GemmStep, KernelStep, NcclStep, OverlapStep, overlap_rows_fault
from workbench import autotune
from workbench.errors import RuntimeFault
from workbench.loader import load


def _model_parallel():
    return load(str(ROOT / "studies/model_parallel.py"))


def _eval_c(text: str, **env) -> int:
    """Evaluate a printed C index expression (64-bit integer arithmetic) in Python."""
    py = re.sub(r"(\d+)LL", r"\1", text).replace("/", "//")
    return eval(py, {}, env)  # noqa: S307 - our own printer's output, in a test


def test_unscheduled_is_gemm_then_nccl_then_epilogue():
    plan = lower(_model_parallel().program, P=2)
    gemm, nccl, epilogue = plan.steps
    assert isinstance(gemm, GemmStep) and isinstance(nccl, NcclStep)
    assert isinstance(epilogue, KernelStep)
    assert [str(x) for x in (gemm.m, gemm.k, gemm.n)] == ["T", "H/2", "H"]
    # The AllReduce is the last use of the partial sums: NCCL reduces them in place.
    assert nccl.src == nccl.dst and nccl.src.buffer == gemm.c.buffer


@pytest.mark.parametrize("P,chunks,mode", [(2, 4, "pull"), (4, 2, "push"), (2, 8, "push")])
def test_overlapped_chunks_tile_every_row_once(P, chunks, mode):
    """Over all (chunk, rank) launches, the reduce-scatter reads and the all-gather writes
    cover every element of the [T, H] output exactly once, at the same whole-tensor index."""
    from studies.model_parallel import build

    _, schedules = build(chunks=chunks)
    program = next(s for s in schedules if s.name == "overlap-mm-fuse-ar-c").apply()
    plan = lower(program, P=P, collective_mode=mode)
    (step,) = plan.steps
    assert isinstance(step, OverlapStep) and step.chunks == chunks
    spec = step.consumer.spec
    assert [p.name for p in spec.params if p.kind == "chunk"] == ["chunk"]
    T, H = 8 * P * chunks, 12
    extent = _eval_c(spec.extent, T=T, H=H)
    assert extent * P * chunks == T * H
    (reduce,) = [ld for ld in spec.loads if ld.mode == "reduce"]
    (gather,) = [st for st in spec.stores if st.peers]
    seen = []
    for c in range(chunks):
        for rank in range(P):
            read = _eval_c(reduce.offset, T=T, H=H, chunk=c, rank=rank)
            assert read == _eval_c(gather.offset, T=T, H=H, chunk=c, rank=rank)
            # Rows [c T/chunks, (c+1) T/chunks) belong to chunk c: a chunk reads only the
            # MatMul rows its producer chunk wrote.
            assert c * T * H // chunks <= read < (c + 1) * T * H // chunks
            seen.extend(range(read, read + extent))
    assert sorted(seen) == list(range(T * H))
    # The residual (a whole tensor read on slices) is read at the same element.
    (residual,) = [ld for ld in spec.loads if ld.mode == "contig"]
    assert residual.offset == reduce.offset


@pytest.mark.parametrize("P", [2, 4])
def test_every_autotuner_candidate_lowers(P):
    """Every overlap the search reaches is generated: a MatMul with a bare ReduceScatter is the
    sequence-parallel overlap, chunked by root (it was refused before issue 24)."""
    result = autotune.search(_model_parallel().program)
    faults = {}
    for cand in result.candidates:
        try:
            lower(cand.program, P=P)
        except RuntimeFault as e:
            faults[cand.name] = str(e)
    assert not faults
    rs = next(c for c in result.candidates if c.name == "split+overlap2")
    (step,) = [s for s in lower(rs.program, P=P).steps if isinstance(s, OverlapStep)]
    assert isinstance(step.consumer, NcclStep) and step.consumer.by_root
    assert step.consumer.op == "reduce_scatter"


def test_overlap_with_an_nccl_allreduce_chunks_the_nccl_call():
    result = autotune.search(_model_parallel().program)
    cand = next(c for c in result.candidates if c.name == "overlap4")
    step = lower(cand.program, P=2).steps[0]
    assert isinstance(step, OverlapStep) and isinstance(step.consumer, NcclStep)
    assert overlap_rows_fault(step, rows=4, P=2) is None  # NCCL needs whole chunks only
    assert overlap_rows_fault(step, rows=6, P=2) == (
        "statement y,summed: the MatMul's 6 output rows must be a multiple of chunks = 4 to "
        "overlap in 4 chunks; pick sizes that divide, or a chunk count that divides them")


def test_fused_overlap_needs_rows_for_every_rank_of_every_chunk():
    step = lower(_model_parallel().schedules["overlap-mm-fuse-ar-c"].apply(), P=2).steps[0]
    assert overlap_rows_fault(step, rows=8192, P=2) is None
    assert "must be a multiple of chunks x ranks = 8 to overlap in 4 chunks" in (
        overlap_rows_fault(step, rows=12, P=2))
