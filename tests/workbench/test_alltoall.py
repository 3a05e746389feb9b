"""AllToAll (issue 24 item 2): the exchange's meaning in the interpreter (hypothesis over P,
shapes and dims), its type and divisibility rules, and each layer's rule for it (cost model,
simulator, lowering to NCCL's all_to_all)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import AllToAll, Compute, Local, P, Program, Replicated, Size, Tensor, float32
from workbench.errors import WorkbenchError
from workbench.interpreter import random_inputs, run


def _program(dim=0):
    T, H = Size("T", multiple_of=P), Size("H", multiple_of=P)
    x = Tensor(float32, [T, H], Local, "x")
    y = AllToAll(x, dim=dim, name="y")
    back = AllToAll(y, dim=dim, name="back")
    return Program(inputs=[x], outputs=[y, back], name="a2a")


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.integers(1, 3), st.integers(1, 3), st.sampled_from([0, 1]),
       st.integers(0, 2**16))
def test_rank_r_block_s_is_rank_s_block_r_and_twice_is_identity(p, rows, cols, dim, seed):
    program = _program(dim)
    sizes = {"T": p * rows, "H": p * cols, "P": p}
    inputs = random_inputs(program, sizes, seed)
    out = run(program, inputs, sizes)
    x = inputs["x"]  # (P, T, H): rank r's tensor at [r]
    for r in range(p):
        for s in range(p):
            got = np.split(out["y"][r], p, axis=dim)[s]
            want = np.split(x[s], p, axis=dim)[r]
            np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(out["back"], x)


def test_alltoall_reads_a_local_tensor():
    N = Size("N", multiple_of=P)
    w = Tensor(float32, [N], Replicated, "w")
    with pytest.raises(WorkbenchError, match=r"AllToAll\(w\): input must be Local, got "
                                             r"Replicated; each rank exchanges its own blocks"):
        AllToAll(w)


def test_the_exchanged_dim_must_divide_by_the_group():
    N = Size("N")
    x = Tensor(float32, [N], Local, "x")
    y = AllToAll(x)
    with pytest.raises(WorkbenchError, match=r"an AllToAll's dim 0 \(N\) must be provably "
                                             r"divisible by the group size P \(one block per "
                                             r"rank\), got no proof; declare it, e\.g\. "
                                             r"Size\(\"N\", multiple_of=P\)"):
        Program(inputs=[x], outputs=[Compute(y * 2.0)], name="bad")


def test_every_layer_prices_runs_and_lowers_it():
    from plan_priced import priced

    from codegen.lower import lower
    from codegen.plan import NcclStep
    from cost_model.hardware import load_hardware
    from simulator import simulate
    from workbench.interpreter import bind_sizes

    program = _program()
    sizes = {"T": 4096, "H": 4096, "P": 8}
    steps = lower(program, 8).steps
    assert [(s.op, s.count) for s in steps] == [("all_to_all", steps[0].count)] * 2
    assert all(isinstance(s, NcclStep) for s in steps)
    cluster = load_hardware("h200x4")
    bound = bind_sizes(program, {**sizes, "P": 4})
    t = float(priced(program, cluster, bound).stmts[0].time_s)  # the first AllToAll
    nbytes = 4096 * 4096 * 4 * 3 / 4  # each rank sends 3/4 of its 64 MiB
    assert nbytes / cluster.nvlink.bandwidth_Bps < t < 4 * nbytes / cluster.nvlink.bandwidth_Bps
    sim = simulate(program, cluster, bound)
    assert sim.time_s == pytest.approx(2 * t, rel=0.2)
