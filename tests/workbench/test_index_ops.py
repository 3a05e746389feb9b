"""The index ops (issue 39 item 2, design decision 106): Gather (an embedding lookup, masked:
an id outside the rows a rank holds gives zeros, so a vocab-parallel table gives Local
partials that AllReduce(Sum) combines) and TopK (values and int32 indices along the last
axis). Their meaning in the interpreter (hypothesis against numpy), their type rules' pinned
messages, the error bounds, and each layer's rule (cost, plan work, lowering, rendering)."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.lower import lower
from codegen.plan import KernelStep, NcclStep
from codegen.render import render
from codegen.work import step_work
from workbench import (
    AllReduce,
    Gather,
    Local,
    P,
    Program,
    Replicated,
    Size,
    Sliced,
    Sum,
    Tensor,
    TopK,
    bfloat16,
    float32,
    int32,
)
from workbench.errors import WorkbenchError
from workbench.interpreter import random_inputs, run
from workbench.interpreter.bounds import bounded_reference
from workbench.loader import load

ROWS = Sliced(0)


def _embedding(table_layout=ROWS, ids_layout=Replicated, dtype=float32):
    V, D, T = Size("V", multiple_of=P), Size("D"), Size("T", multiple_of=P)
    table = Tensor(dtype, [V, D], table_layout, "table")
    ids = Tensor(int32, [T], ids_layout, "ids", range=(-3.0, 40.0))
    e = Gather(table, ids, name="e")
    out = AllReduce(Sum, e, name="out") if e.type.layout == Local else e
    return Program(inputs=[table, ids], outputs=[out], name="embedding")


def _lookup(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    held = (ids >= 0) & (ids < table.shape[0])
    return np.where(held[..., None], table[np.clip(ids, 0, table.shape[0] - 1)], 0)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(1, 8), st.integers(1, 3), st.integers(1, 4),
       st.integers(0, 2**16))
def test_a_vocab_parallel_lookup_all_reduced_is_the_whole_lookup(p, rows, d, t, seed):
    program = _embedding()
    sizes = {"V": p * rows, "D": d, "T": p * t, "P": p}
    x = random_inputs(program, sizes, seed)
    got = run(program, x, sizes)["out"]
    np.testing.assert_array_equal(got, _lookup(x["table"], x["ids"]))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(1, 8), st.integers(1, 3), st.integers(0, 2**16))
def test_each_rank_looks_up_its_own_ids_in_a_replicated_table(p, v, t, seed):
    program = _embedding(Replicated, Sliced(0))
    sizes = {"V": p * v, "D": 2, "T": p * t, "P": p}
    x = random_inputs(program, sizes, seed)
    np.testing.assert_array_equal(run(program, x, sizes)["e"], _lookup(x["table"], x["ids"]))


def _router(k=2, n=8, layout=ROWS, dtype=float32):
    T = Size("T", multiple_of=P)
    x = Tensor(dtype, [T, n], layout, "x")
    values, indices = TopK(x, k, name="top")
    return Program(inputs=[x], outputs=[values, indices], name="router")


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(1, 8), st.integers(1, 8), st.integers(1, 4),
       st.booleans(), st.integers(0, 2**16))
def test_top_k_is_numpy_sorted_largest_first_ties_by_index(p, n, k, t, ties, seed):
    k = min(k, n)
    program = _router(k, n)
    sizes = {"T": p * t, "P": p}
    x = random_inputs(program, sizes, seed)
    if ties:  # few distinct values: ties decided by the lower index
        x["x"] = np.round(x["x"]).astype(np.float32)
    out = run(program, x, sizes)
    for row, values, indices in zip(x["x"], out["top"], out["top_idx"]):
        order = sorted(range(n), key=lambda c: (-row[c], c))[:k]
        np.testing.assert_array_equal(indices, order)
        np.testing.assert_array_equal(values, row[order])
    assert out["top_idx"].dtype == np.int32


def test_nan_comes_after_every_number():
    program = _router(2, 4, Replicated)
    x = {"x": np.array([[np.nan, -np.inf, 1.0, np.nan]], dtype=np.float32)}
    out = run(program, x, {"T": 1, "P": 1})
    np.testing.assert_array_equal(out["top_idx"], [[2, 1]])


def test_top_k_bounds_check_indices_only_where_the_choice_is_clear():
    program = _router(1, 4, Replicated)
    x = {"x": np.array([[0.0, 3.0, 1.0, 2.0]], dtype=np.float32)}
    ref = bounded_reference(program, x, {"T": 1, "P": 1})
    assert ref.values["top_idx"].tolist() == [[1]] and ref.bounds["top_idx"].tolist() == [[0]]
    assert ref.bounds["top"].tolist() == [[0]]  # inputs are exact


@pytest.mark.parametrize("make, message", [
    (lambda V, T: Gather(Tensor(float32, [V, 4], Replicated, "tab"),
                         Tensor(float32, [T], Replicated, "idf")),
     r"Gather\(tab, idf\): ids must be int32, got f32 for 'idf'; declare them "
     r"Tensor\(int32, \.\.\.\) \(a float index would round\)"),
    (lambda V, T: Gather(Tensor(float32, [V, 4, 2], Replicated, "tab"),
                         Tensor(int32, [T], Replicated, "ids")),
     r"Gather\(tab, ids\): the table must be 2-D \[V, D\], got \[V, 4, 2\] for 'tab'"),
    (lambda V, T: Gather(Tensor(float32, [V, 4], Sliced(0), "tab"),
                         Tensor(int32, [T], Sliced(0), "ids")),
     r"Gather\(tab, ids\): the layouts of table and ids must be a supported lookup, got "
     r"table Sliced\(0\) with ids Sliced\(0\); use a Replicated table, a vocab-parallel "
     r"table Sliced\(0\) with Replicated or Local ids \(then AllReduce\(Sum\)\), or a table "
     r"Sliced\(1\) with Replicated ids"),
    (lambda V, T: Gather(Tensor(float32, [V, 4], Local, "tab"),
                         Tensor(int32, [T], Sliced(0), "ids")),
     r"Gather\(tab, ids\): a Local table must be read with Replicated or Local ids, got "
     r"Sliced\(0\); AllGather the ids first"),
    (lambda V, T: TopK(Tensor(float32, [T, V], Replicated, "x"), 2),
     r"TopK\(x, k=2, values\): k must be at most the axis length, got k=2 for an axis of "
     r"length V; declare the axis length as a number \(e\.g\. 8 experts\) or lower k"),
    (lambda V, T: TopK(Tensor(float32, [T, 8], Replicated, "x"), 9),
     r"k must be at most the axis length, got k=9 for an axis of length 8"),
    (lambda V, T: TopK(Tensor(float32, [T, 64], Replicated, "x"), 33),
     r"k must be an int in \[1, 32\], got 33; the kernel keeps k values a lane in registers"),
    (lambda V, T: TopK(Tensor(float32, [T, V], Sliced(1), "x"), 1),
     r"TopK\(x, k=1, values\): the top-k axis must be whole on every rank, got x Sliced\(1\) "
     r"\(the axis is sliced\); AllGather it first"),
    (lambda V, T: TopK(Tensor(int32, [T, 8], Replicated, "x"), 1),
     r"x must be a float tensor, got i32; Cast it to float32 first"),
])
def test_index_ops_refuse_with_the_reason(make, message):
    V, T = Size("V", multiple_of=P), Size("T", multiple_of=P)
    with pytest.raises(WorkbenchError, match=message):
        make(V, T)


def test_a_sliced_table_gives_partials_and_a_replicated_one_keeps_the_ids_layout():
    V, T = Size("V", multiple_of=P), Size("T", multiple_of=P)
    ids = Tensor(int32, [T, 3], Replicated, "ids")
    assert Gather(Tensor(bfloat16, [V, 8], Sliced(0), "a"), ids).type.layout == Local
    assert Gather(Tensor(bfloat16, [V, 8], Sliced(1), "b"), ids).type.layout == Sliced(2)
    g = Gather(Tensor(bfloat16, [V, 8], Replicated, "c"), ids)
    assert g.type.layout == Replicated and g.type.dtype == bfloat16
    assert [str(d) for d in g.type.shape] == ["T", "3", "8"]


SIZES = {"V": 1024, "D": 64, "T": 256}


def test_index_kernels_move_and_compute_what_they_do():
    """A gather reads its ids and the rows it picks and writes its output (a masked row is a
    zero, not read); a top-k compares each input element with the k best so far."""
    program = _embedding()
    bound = {sympy.Symbol(k, integer=True, positive=True): v for k, v in SIZES.items()}
    bound[P] = 4
    out_bytes = 256 * 64 * 4  # every rank writes the whole [T, D] partial
    plan = lower(program, 4)
    kernel = next(s for s in plan.steps if isinstance(s, KernelStep))
    sw = step_work(kernel, 4)
    subs = {s: v for s, v in bound.items()}
    assert float((sw.read_bytes + sw.write_bytes).subs(subs)) == 256 * 4 + 2 * out_bytes
    assert float(sympy.sympify(kernel.flops).subs(subs)) == 0
    router = lower(_router(2, 8), 4)
    top = [s for s in router.steps if isinstance(s, KernelStep) and s.spec.kind == "topk"]
    assert top and all(float(sympy.sympify(k.flops).subs(subs)) > 0 for k in top)
    # k = 2 of 8 experts on a rank's T / P rows
    assert float(sympy.sympify(top[0].flops).subs(subs)) == 2 * (256 // 4) * 8


def test_gather_lowers_to_a_masked_kernel_then_nccl():
    plan = lower(_embedding(), 2)
    kinds = [(type(s).__name__, getattr(getattr(s, "spec", None), "kind", None))
             for s in plan.steps]
    assert kinds == [("KernelStep", "gather"), ("NcclStep", None)]
    assert isinstance(plan.steps[1], NcclStep) and plan.steps[1].op == "all_reduce"
    src = render(plan.steps[0].spec)
    assert "const int* __restrict__ p_ids" in src
    assert "const long long wb_lo = ((size_V * rank) / (2LL));" in src  # rank r's rows
    assert "wb_row >= 0 && wb_row < wb_held" in src


def test_top_k_lowers_to_a_warp_per_row_kernel_per_part():
    plan = lower(_router(2, 8), 2)
    specs = [s.spec for s in plan.steps]
    assert [s.kind for s in specs] == ["topk", "topk"]
    assert [s.index.part for s in specs] == ["values", "indices"]
    src = render(specs[1])
    assert "constexpr int K = 2;" in src and "int* __restrict__ p_top_idx" in src
    assert "__shfl_xor_sync" in src


@pytest.mark.parametrize("spec", ["studies/vocab_parallel_embedding.py", "studies/moe_router.py"])
def test_the_studies_schedules_match_the_program_in_the_interpreter(spec):
    pf = load(str(ROOT / spec))
    sizes = {"V": 64, "H": 8, "T": 16, "P": 4}
    x = random_inputs(pf.program, sizes, seed=5)
    want = run(pf.program, x, sizes)
    assert any(v.any() for v in want.values())
    for name, sched in pf.schedules.items():
        got = run(sched.apply(), x, sizes)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"{spec} {name} {k}")


def test_a_table_sliced_over_its_columns_gives_each_rank_its_columns():
    V, D, T = Size("V"), Size("D", multiple_of=P), Size("T")
    table = Tensor(float32, [V, D], Sliced(1), "table")
    ids = Tensor(int32, [T], Replicated, "ids")
    program = Program(inputs=[table, ids], outputs=[Gather(table, ids, name="e")], name="cols")
    sizes = {"V": 16, "D": 8, "T": 5, "P": 4}
    x = random_inputs(program, sizes, 2)
    np.testing.assert_array_equal(run(program, x, sizes)["e"], _lookup(x["table"], x["ids"]))
    plan = lower(program, 4)
    src = render(plan.steps[0].spec)
    assert "const long long wb_cols = ((D) / (4LL));" in src and "wb_lo = 0LL;" in src


def test_a_fuse_holding_an_index_op_says_it_runs_alone():
    from workbench import schedule
    from workbench.errors import IllegalTransform

    program = _embedding()

    @schedule(program)
    def fused(s):
        s.fuse("e", "out")

    with pytest.raises(IllegalTransform, match=r"fuse\(e, out\): an index op \(Gather, TopK\) "
                                               r"must run as its own kernel, got e in the "
                                               r"region; fuse the statements around it"):
        fused.apply()


def test_top_k_runs_along_the_last_axis_only():
    T = Size("T")
    x = Tensor(float32, [T, 8], Replicated, "x")
    assert TopK(x, 2, axis=1)[0].type.shape[-1] == 2
    with pytest.raises(WorkbenchError, match=r"TopK's axis must be the last axis \(-1 or 1 for a "
                                             r"tensor of rank 2\), got 0; move the axis last"):
        TopK(x, 2, axis=0)
