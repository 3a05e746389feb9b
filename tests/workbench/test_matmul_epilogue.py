"""MatMul + elementwise epilogue as one fused region (Fused kind "matmul"): the interpreter's
meaning is kept (hypothesis, every dtype and epilogue), illegal fusions are refused with pinned
messages, cuBLASLt's epilogues are recognised (and the DSL's gelu_tanh traces to the pattern),
the cost model and simulator price the saved round trip, and codegen lowers each form."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.lower import lower
from codegen.plan import GemmStep, KernelStep
from cost_model import load_hardware
from cost_model.plan_cost import plan_cost
from simulator import simulate
from workbench import (
    Compute,
    MatMul,
    P,
    Program,
    Replicated,
    Size,
    Sliced,
    Tensor,
    bfloat16,
    float16,
    float32,
    gelu,
    gelu_tanh,
    ir,
    maximum,
    schedule,
    where,
)
from workbench.errors import IllegalTransform, WorkbenchError
from workbench.interpreter import assert_equivalent, bind_sizes

DTYPES = {"f16": float16, "bf16": bfloat16, "f32": float32}
EPILOGUES = {
    "bias": (lambda mm, b: mm + b, "bias"),
    "bias_relu": (lambda mm, b: maximum(mm + b, 0.0), "bias_relu"),
    "bias_gelu_tanh": (lambda mm, b: gelu_tanh(mm + b), "bias_gelu_tanh"),
    "bias_first": (lambda mm, b: gelu_tanh(b + mm), "bias_gelu_tanh"),
    "gelu_erf": (lambda mm, b: gelu(mm + b), None),
    "masked": (lambda mm, b: where(mm > 0, mm * 2.0, b), None),
    "scaled": (lambda mm, b: (mm + b) * 0.5, None),
}


def _program(dtype, epilogue, column_parallel=False):
    """mm = x @ w and its epilogue y; one the library does not run has a second statement z
    (a single such statement is one kernel after the GEMM already: fusing it is refused,
    tests/workbench/test_fuse_changes_the_plan.py)."""
    T, H, F = Size("T", multiple_of=P), Size("H"), Size("F", multiple_of=P)
    x = Tensor(dtype, [T, H], Replicated, "x")
    w = Tensor(dtype, [H, F], Sliced(1) if column_parallel else Replicated, "w")
    b = Tensor(dtype, [F], Sliced(0) if column_parallel else Replicated, "b")
    mm = MatMul(x, w, name="mm")
    y = Compute(EPILOGUES[epilogue][0](mm, b), name="y")
    epilogue_stmts = [y] if EPILOGUES[epilogue][1] else [y, Compute(y * 2.0, name="z")]
    program = Program(inputs=[x, w, b], outputs=[epilogue_stmts[-1]], name="mm_epilogue")

    @schedule(program)
    def fused(s):
        s.fuse(mm, *epilogue_stmts)

    return program, fused


@settings(max_examples=25, deadline=None)
@given(dtype=st.sampled_from(sorted(DTYPES)), epilogue=st.sampled_from(sorted(EPILOGUES)),
       column=st.booleans(), t=st.integers(1, 4), h=st.integers(1, 6), f=st.integers(1, 4),
       Pn=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_fusing_a_matmul_with_its_epilogue_keeps_the_meaning(dtype, epilogue, column, t, h, f,
                                                              Pn, seed):
    program, fused = _program(DTYPES[dtype], epilogue, column)
    after = fused.apply()
    assert isinstance(after.stmts[0].op, ir.Fused) and after.stmts[0].op.kind == "matmul"
    assert_equivalent(program, after, {"T": Pn * t, "H": h, "F": Pn * f, "P": Pn}, seed=seed)


@pytest.mark.parametrize("epilogue", sorted(EPILOGUES))
@pytest.mark.parametrize("column", [False, True])
def test_library_epilogues_are_recognised(epilogue, column):
    _, fused = _program(float16, epilogue, column)
    region = fused.apply().stmts[0]
    types = {v.name: v.type for v in fused.apply().all_values()}
    lib = ir.library_epilogue(region.op.body, types)
    want = EPILOGUES[epilogue][1]
    assert (lib.kind if lib else None) == want
    if lib:
        assert lib.bias == "b"


def test_the_dsl_gelu_tanh_traces_to_the_library_pattern():
    program, _ = _program(float32, "bias_gelu_tanh")
    y = program.stmts[-1].op.expr
    assert y == ir.epilogue.gelu_tanh_of(ir.Binary("add", ir.Ref("mm"), ir.Ref("b")))


def test_a_bias_of_another_layout_or_dtype_is_no_library_epilogue():
    T, H, F = Size("T", multiple_of=P), Size("H"), Size("F", multiple_of=P)
    x = Tensor(float16, [T, H], Replicated, "x")
    w = Tensor(float16, [H, F], Sliced(1), "w")
    b = Tensor(float16, [F], Replicated, "b")  # whole row on every rank: not its columns
    mm = MatMul(x, w, name="mm")
    y = Compute(gelu_tanh(mm + b), name="y")
    program = Program(inputs=[x, w, b], outputs=[y], name="p")

    @schedule(program)
    def fused(s):
        s.fuse(mm, y)

    types = {v.name: v.type for v in program.all_values()}
    assert ir.library_epilogue(program.stmts, types) is None
    kinds = [type(s).__name__ for s in lower(program, 2).steps]
    assert kinds == ["GemmStep", "KernelStep"]  # as written: the fuse would change nothing
    with pytest.raises(WorkbenchError, match=r"fuse\(mm, y\): a MatMul's epilogue must be one "
                       r"the GEMM library runs"):
        fused.apply()


def _bad(build):
    T, H, F = Size("T", multiple_of=P), Size("H"), Size("F", multiple_of=P)
    x = Tensor(float32, [T, H], Replicated, "x")
    w = Tensor(float32, [H, F], Replicated, "w")
    b = Tensor(float32, [F], Replicated, "b")
    mm = MatMul(x, w, name="mm")
    return build(x, w, b, mm)


def test_an_epilogue_must_read_the_matmul():
    def build(x, w, b, mm):
        z = Compute(mm + 1.0, name="z")
        y = Compute(b * 2.0, name="y")
        program = Program(inputs=[x, w, b], outputs=[z, y], name="p")
        return program, (mm, y)

    program, (mm, y) = _bad(build)
    assert [s.name for s in program.stmts] == ["mm", "z", "y"]

    @schedule(program)
    def fused(s):
        s.fuse(mm, y)

    with pytest.raises(WorkbenchError, match=r"fuse\(mm, y\): the epilogue must read the "
                       r"MatMul's output mm, got y = b \* 2"):
        fused.apply()


def test_a_matmul_after_its_would_be_epilogue_matches_no_kernel():
    def build(x, w, b, mm):
        y = Compute(b * 2.0, name="y")
        return Program(inputs=[x, w, b], outputs=[y, mm], name="p"), (mm, y)

    program, (mm, y) = _bad(build)

    @schedule(program)
    def fused(s):
        s.fuse(y, mm)

    with pytest.raises(WorkbenchError, match=r"statements \[Compute, MatMul\] match no fused "
                       r"kernel; fuse ReduceScatter \+ computation \+ AllGather, consecutive "
                       r"elementwise statements, computation \+ Send, or a MatMul then its "
                       r"elementwise epilogue \(see ir.Fused\)"):
        fused.apply()


def test_an_epilogue_must_be_elementwise_over_the_matmul():
    T = Size("T", multiple_of=P)

    def build(x, w, b, mm):
        u = Tensor(float32, [3, T, Size("F", multiple_of=P)], Replicated, "u")
        y = Compute(mm + u, name="y")  # broadcasts mm up to [3, T, F]
        return Program(inputs=[x, w, b, u], outputs=[y], name="p"), (mm, y)

    program, (mm, y) = _bad(build)

    @schedule(program)
    def fused(s):
        s.fuse(mm, y)

    with pytest.raises(IllegalTransform, match=r"fuse\(mm, y\): an epilogue must be elementwise "
                       r"over the MatMul's output mm \(local shape \[T, F\]\), got y over "
                       r"\[3, T, F\]"):
        fused.apply()


def test_the_matmul_must_be_read_only_by_its_epilogue():
    def build(x, w, b, mm):
        y = Compute(mm + b, name="y")
        z = Compute(mm * 2.0, name="z")
        return Program(inputs=[x, w, b], outputs=[y, z], name="p"), (mm, y)

    program, (mm, y) = _bad(build)

    @schedule(program)
    def fused(s):
        s.fuse(mm, y)

    with pytest.raises(IllegalTransform, match=r"fuse\(mm, y\): the MatMul's output mm must be "
                       r"read only by its epilogue, got a use by z; fuse those readers into "
                       r"the epilogue, or leave the MatMul unfused"):
        fused.apply()


SIZES = {"T": 8192, "H": 12288, "F": 49152, "P": 1}


@pytest.mark.parametrize("epilogue,saved", [("bias_gelu_tanh", True), ("gelu_erf", False)])
def test_the_cost_model_prices_the_saved_round_trip(epilogue, saved):
    program, fused = _program(float16, epilogue)
    after = fused.apply()
    cluster = load_hardware("h200x4")
    bound = bind_sizes(program, SIZES)
    # the price of what runs: each program's plan (decision 104)
    before_s = float(plan_cost(lower(program, 1), cluster, bound).time_s)
    after_s = float(plan_cost(lower(after, 1), cluster, bound).time_s)
    round_trip_s = float(cluster.gpu.hbm_time_s(2 * 8192 * 49152 * 2, 8192 * 49152 * 2,
                                                 8192 * 49152 * 2, 8192 * 49152 * 2))
    if saved:  # the product is neither written nor read back; one launch fewer
        assert before_s - after_s == pytest.approx(
            round_trip_s + cluster.gpu.launch_latency_s, rel=0.05)
    else:  # the GEMM and one epilogue kernel for two: y's round trip and a launch saved
        assert after_s < before_s
    sim = simulate(after, cluster, bound)
    assert float(sim.time_s) == pytest.approx(after_s, rel=0.01)


def test_codegen_lowers_the_library_form_to_one_gemm():
    _, fused = _program(bfloat16, "bias_relu", column_parallel=True)
    (step,) = lower(fused.apply(), 2).steps
    assert isinstance(step, GemmStep)
    assert (step.epilogue, step.bias.buffer, step.c.buffer, str(step.n)) == (
        "bias_relu", "b", "y", "F/2")


def test_codegen_lowers_another_epilogue_to_a_gemm_and_one_kernel():
    _, fused = _program(float16, "masked")
    gemm, kernel = lower(fused.apply(), 2).steps
    assert isinstance(gemm, GemmStep) and not gemm.epilogue and gemm.c.buffer == "mm"
    assert isinstance(kernel, KernelStep) and kernel.stmts == ("y", "z")
