"""Issue 24 item 1: whatever `check` accepts is generated. Every named schedule and every
autotuner candidate of the studies and of the user programs (tests/programs/users) lowers at
P = 2 and 4, or `check` refuses it; never a refusal from the backend alone."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT

from codegen.lower import lower
from codegen.plan import KernelStep, NcclStep, OverlapStep
from workbench import autotune, ir
from workbench.errors import IllegalTransform
from workbench.interpreter import assert_equivalent
from workbench.loader import load
from workbench.runtime.chunked import by_root_pieces
from workbench.transforms import Overlap

FILES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests/programs/users").glob("*.py")) + [
    "studies/model_parallel.py", "studies/parameter_server.py", "studies/pipeline.py",
    "studies/allreduce_rmsnorm.py", "studies/lamb.py", "studies/sequence_parallel.py",
    "studies/moe.py"]


def _programs(spec):
    pf = load(str(ROOT / spec))
    named = [(n, s.apply()) for n, s in pf.schedules.items()]
    found = autotune.search(pf.program, max_depth=4, max_candidates=40)
    return [("unscheduled", pf.program), *named,
            *((c.name, c.program) for c in found.candidates[1:])]


@pytest.mark.parametrize("spec", [f for f in FILES if (ROOT / f).exists()])
def test_every_schedule_and_candidate_lowers(spec):
    failed = {}
    for P in (2, 4):
        for name, program in _programs(spec):
            try:
                lower(program, P)
            except Exception as e:  # noqa: BLE001 - the test names whatever was refused
                failed[f"{name} at P={P}"] = f"{type(e).__name__}: {e}"
    assert not failed, failed


def _user(name):
    return load(str(ROOT / "tests/programs/users" / name))


def test_a_reduce_tensor_inside_a_fused_collective_is_a_cross_rank_max():
    pf = _user("amax_cast.py")
    fused = pf.schedules["fuse-rs-c-ag"].apply()
    assert_equivalent(pf.program, fused, {"N": 64, "P": 4})
    plan = lower(fused, 4)
    kernels = [s for s in plan.steps if isinstance(s, KernelStep)]
    assert [k.spec.kind for k in kernels] == ["collective", "finish", "elementwise"]
    (acc,) = kernels[0].spec.norms
    assert acc.op == "max"
    (fin,) = kernels[1].spec.norms
    assert fin.op == "max" and len(fin.partials) == 4  # every rank's partials


def test_a_product_inside_a_fused_collective_is_a_cross_rank_product():
    """ReduceTensor(Prod) in a fused collective (issue 24): per-block f64 products, every
    rank's partials multiplied in rank order by the finishing kernel (was "not generated")."""
    pf = _user("prod_scale.py")
    fused = pf.schedules["fuse-rs-c-ag"].apply()
    assert_equivalent(pf.program, fused, {"N": 64, "P": 4})
    plan = lower(fused, 4)
    kernels = [s for s in plan.steps if isinstance(s, KernelStep)]
    assert [k.spec.kind for k in kernels] == ["collective", "finish", "elementwise"]
    (acc,) = kernels[0].spec.norms
    assert acc.op == "prod"
    (fin,) = kernels[1].spec.norms
    assert fin.op == "prod" and len(fin.partials) == 4
    from codegen.render import render

    source = render(kernels[1].spec)
    assert "total *= wb::product_partials(" in source and source.count("product_partials") == 4
    assert "wb::write_block_product(" in render(kernels[0].spec)


def test_a_read_after_an_update_keeps_the_old_value():
    pf = _user("weight_delta.py")
    for program in (pf.program, pf.schedules["rs-c-ag"].apply()):
        plan = lower(program, 2)
        assert plan.locs["w1" if "w1" in plan.locs else "w1_s"].buffer != "w"
        assert plan.locs["w"].buffer == "w"  # the old weights stay where `delta` reads them
    assert_equivalent(pf.program, pf.schedules["rs-c-ag"].apply(), {"N": 32, "P": 2})


def test_compute_overlapped_with_a_broadcast_is_a_chunked_kernel_and_nccl():
    pf = load(str(ROOT / "studies/parameter_server.py"))
    program = pf.schedules["overlap-c-bcast"].apply()
    assert_equivalent(pf.program, program, {"N": 64, "P": 4})
    (step,) = [s for s in lower(program, 4).steps if isinstance(s, OverlapStep)]
    assert isinstance(step.producer, KernelStep) and isinstance(step.consumer, NcclStep)
    assert step.consumer.op == "broadcast" and step.chunks == 4
    assert any(p.kind == "chunk" for p in step.producer.spec.params)


def test_a_matmul_overlapped_with_layernorm_in_a_fused_allreduce_is_a_chunked_row_kernel():
    pf = _user("tp_attn_out_layernorm.py")
    program = pf.schedules["overlap-mm-fuse-rs-c-ag"].apply()
    assert_equivalent(pf.program, program, {"T": 32, "H": 16, "P": 2}, seed=1)
    (step,) = lower(program, 2).steps
    assert isinstance(step, OverlapStep) and step.consumer.spec.row is not None
    assert any(p.kind == "chunk" for p in step.consumer.spec.params)


def test_an_overlap_no_backend_runs_is_refused_by_check_with_the_forms():
    pf = load(str(ROOT / "studies/pipeline.py"))
    # the residual's epilogue (a Compute) then the unfused Send of it: no backend pipelines it
    with pytest.raises(IllegalTransform, match=r"^overlap\(z, out, chunks=4\): the pair must be "
                       r"one of the overlaps the backends run \(a MatMul then an AllReduce, .*\), "
                       r"got Compute then Send; overlap another pair or leave them sequential$"):
        Overlap("z", "out", 4).apply(pf.program)


@pytest.mark.parametrize("P,chunks", [(2, 2), (2, 3), (4, 2), (4, 8), (3, 4)])
def test_chunks_by_root_cover_every_row_once_in_row_order(P, chunks):
    count, size = 12, 4  # elements per rank, f32
    for op in ("all_gather", "reduce_scatter"):
        covered = np.zeros(count * P, int)
        for i in range(chunks):
            for rank in range(P):
                for kind, src, dst, n, root in by_root_pieces(op, 0, 10**6, count, "f32", i,
                                                              chunks, P, rank):
                    assert kind == ("broadcast" if op == "all_gather" else "reduce")
                    whole = (dst - 10**6) // size if op == "all_gather" else src // size
                    part = (src // size) if op == "all_gather" else (dst - 10**6) // size
                    assert root * count <= whole < (root + 1) * count
                    if op == "all_gather":
                        assert part == whole - root * count  # the root's own rows
                    elif rank == root:
                        assert part == whole - root * count  # into the root's part
                    else:
                        assert dst == src  # a non-root receives nothing
                    if rank == 0:
                        covered[whole:whole + n] += 1
                    assert i * count * P // chunks <= whole < (i + 1) * count * P // chunks
        assert (covered == 1).all()


@pytest.mark.parametrize("P", [1, 2, 4])
def test_sequence_parallel_overlaps_keep_the_meaning_and_chunk_nccl_by_root(P):
    pf = load(str(ROOT / "studies/sequence_parallel.py"))
    program = pf.schedules["overlap-both"].apply()
    assert_equivalent(pf.program, program, {"T": 16, "H": 8, "F": 16, "P": P}, seed=P)
    overlaps = [s for s in lower(program, P).steps if isinstance(s, OverlapStep)]
    gather, scatter = overlaps
    assert gather.producer.op == "all_gather" and gather.producer.by_root
    assert type(gather.consumer).__name__ == "GemmStep"
    assert scatter.consumer.op == "reduce_scatter" and scatter.consumer.by_root
    assert type(scatter.producer).__name__ == "GemmStep"


def test_moe_lowers_to_two_nccl_all_to_alls_around_the_expert_gemms():
    pf = load(str(ROOT / "studies/moe.py"))
    steps = lower(pf.program, 4).steps
    kinds = [s.op if isinstance(s, NcclStep) else type(s).__name__ for s in steps]
    assert kinds[0] == "all_to_all" and "all_to_all" in kinds[1:]
    assert kinds.count("GemmStep") == 3
    assert_equivalent(pf.program, pf.schedules["overlap-both"].apply(),
                      {"T": 8, "H": 8, "F": 16, "P": 4})


def test_a_fused_gather_that_starts_with_norms_walks_their_inputs():
    """LAMB's candidate split+reorder+as-slice+fuse+fuse#bab36b fuses w_norm, u_norm, the update
    and the gather: its first launch walks the norms' inputs (was: a domain of 1 element, not
    generated)."""
    pf = load(str(ROOT / "studies/lamb.py"))
    found = autotune.search(pf.program)
    cand = next(c for c in found.candidates if c.name == "split+reorder+as-slice+fuse+fuse#bab36b")
    kinds = [getattr(getattr(s, "spec", None), "kind", type(s).__name__)
             for s in lower(cand.program, 4).steps]
    assert kinds[-3:] == ["elementwise", "finish", "collective"]
    assert_equivalent(pf.program, cand.program, {"N": 32, "P": 4})


def test_an_overlap_with_a_norm_in_its_fused_collective_is_refused_by_check():
    """A norm needs every chunk before what it scales: check refuses the overlap (lowering
    refused it before, after check had accepted it)."""
    from workbench import (
        AllReduce,
        Compute,
        MatMul,
        Norm,
        P,
        Program,
        Size,
        Sliced,
        Sum,
        Tensor,
        float16,
    )
    from workbench.transforms import Fuse, Reorder, Split

    T, H = Size("T", multiple_of=P), Size("H", multiple_of=P)
    x = Tensor(float16, [T, H], Sliced(1), "x")
    W = Tensor(float16, [H, H], Sliced(0), "W")
    y = MatMul(x, W, name="y")
    ysum = AllReduce(Sum, y, name="ysum")
    n = Norm(ysum, name="n")
    out = Compute(ysum / n, name="out")
    p = Program(inputs=[x, W], outputs=[out], name="mm_norm")
    p = Split("ysum").apply(p)
    p = Reorder(("n", "out"), "ysum").apply(p)
    p = Fuse(("ysum_rs", "n", "out_s", "out")).apply(p)
    with pytest.raises(IllegalTransform, match=r"got MatMul then a fused allreduce; "):
        Overlap("y", "ysum_rs", 2).apply(p)


@pytest.mark.parametrize("spec", [f for f in FILES if (ROOT / f).exists()])
def test_copy_engines_on_any_fused_region_lower_or_are_refused(spec):
    """`s.copy_engines(region)` on every fused region of every named schedule: the transform
    refuses it (IllegalTransform, with the reason) or the result lowers; never the backend."""
    from workbench.transforms import CopyEngines

    pf = load(str(ROOT / spec))
    failed = {}
    for name, sched in pf.schedules.items():
        program = sched.apply()
        for s in program.stmts:
            if not isinstance(s.op, ir.Fused):
                continue
            try:
                moved = CopyEngines(s.outs[0].name, 2).apply(program)
            except IllegalTransform:
                continue
            try:
                lower(moved, 2)
            except Exception as e:  # noqa: BLE001 - the test names whatever was refused
                failed[f"{name}: {s.name}"] = f"{type(e).__name__}: {e}"
    assert not failed, failed
