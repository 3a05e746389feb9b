"""Bad programs get errors that name the op, the line, what was expected and the fix."""

import re

import pytest

from workbench import *
from workbench.errors import DTypeError, LayoutError, ShapeError, VerifyError

N = Size("N", multiple_of=P)
M = Size("M")


def _line_of(fragment: str) -> str:
    """file:line where `fragment` is written in this file (errors point there)."""
    with open(__file__) as f:
        for no, line in enumerate(f, 1):
            if fragment in line and "_line_of" not in line:
                return f"test_dsl_errors.py:{no}"
    raise AssertionError(fragment)


def test_allreduce_of_replicated_names_op_and_line():
    w = Tensor(float32, [N], Replicated, "w")
    with pytest.raises(LayoutError) as e:
        AllReduce(Sum, w)  # bad-allreduce
    assert str(e.value) == (
        "AllReduce(Sum, w): input must be Local, got Replicated; only per-rank (Local) values "
        f"need reducing (at {_line_of('# bad-allreduce')})")


def test_shape_mismatch():
    a = Tensor(float32, [N], Local, "a")
    b = Tensor(float32, [M], Local, "b")
    with pytest.raises(ShapeError, match=re.escape(
            "'+': shapes must match or broadcast, got [N] and [M] (dim 0 is N vs M); reshape "
            "or slice one operand")):
        a + b


def test_local_meets_sliced():
    a = Tensor(float32, [N], Local, "a")
    s = Tensor(float32, [N], Sliced(0), "s")
    with pytest.raises(LayoutError, match="operands of layouts Sliced\\(0\\) and Local cannot be "
                       "combined elementwise; a Local value must be reduced"):
        s * a


def test_different_groups():
    stage = Stage("stage1")
    a = Tensor(float32, [N], Replicated, "a")
    b = Tensor(float32, [N], Replicated, "b", group=stage)
    with pytest.raises(LayoutError, match=re.escape(
            "operands must be in the same process group, got world(P) and stage1(P); Send the "
            "value to the other group first")):
        a + b


def test_half_and_bfloat_need_no_cast_but_int_does():
    h = Tensor(float16, [N], Local, "h")
    i = Tensor(int32, [N], Local, "i")
    with pytest.raises(DTypeError, match="must both be float or share a dtype, got f16 and i32; "
                       "insert Cast"):
        h + i


def test_update_replicated_with_local():
    w = Tensor(float32, [N], Replicated, "w")
    g = Tensor(float32, [N], Local, "g")
    with pytest.raises(LayoutError, match="a Replicated target must be updated with a Replicated "
                       "or Sliced value, got Local; .* AllReduce the value first"):
        Update(w, w - g)


def test_update_shape_mismatch():
    w = Tensor(float32, [N], Replicated, "w")
    x = Tensor(float32, [M], Replicated, "x")
    with pytest.raises(ShapeError, match=re.escape("new value must have the target's shape [N], "
                                                   "got [M]")):
        Update(w, x)


def test_sliced_dim_not_provably_divisible():
    g = Tensor(float32, [M], Local, "g")
    rs = ReduceScatter(Sum, g)
    with pytest.raises(VerifyError) as e:
        Program(inputs=[g], outputs=[rs])
    msg = str(e.value)
    assert "Sliced(0) dim M must be provably divisible by the group size P, got no proof; " \
           "declare it, e.g. Size(\"M\", multiple_of=P)" in msg
    assert ">> rs = ReduceScatter(Sum, g)" in msg  # the program is printed, the op marked


def test_matmul_layouts():
    x = Tensor(float16, [M, N], Replicated, "x")
    W = Tensor(float16, [N, N], Sliced(0), "W")
    with pytest.raises(LayoutError, match="layouts Replicated @ Sliced\\(0\\) are not a "
                       "supported parallel MatMul; use Replicated @ Sliced\\(1\\)"):
        MatMul(x, W)


def test_matmul_inner_dims():
    x = Tensor(float16, [M, N], Replicated, "x")
    W = Tensor(float16, [M, N], Replicated, "W")
    with pytest.raises(ShapeError, match=re.escape("inner dims must match, got [M, N] @ [M, N]")):
        MatMul(x, W)


def test_send_to_own_group():
    x = Tensor(float32, [N], Replicated, "x")
    with pytest.raises(LayoutError, match="Send must go to another group, got its own world"):
        Send(x, WORLD)


def test_input_not_declared():
    g = Tensor(float32, [N], Local, "g")
    h = Tensor(float32, [N], Local, "h")
    with pytest.raises(WorkbenchError, match="tensor 'h' must be listed in Program\\(inputs="):
        Program(inputs=[g], outputs=[AllReduce(Sum, g + h)])


def test_pipeline_send_must_go_to_next_stage():
    s0, s1, s2 = Stage("s0"), Stage("s1"), Stage("s2")
    y = Tensor(float16, [N], Replicated, "y", group=s0)
    out = Send(y, s2)
    with pytest.raises(WorkbenchError, match="a pipeline Send must go from a stage to the next "
                       "one in \\['s0', 's1', 's2'\\], got s0 -> s2"):
        Pipeline([s0, s1, s2], inputs=[y], outputs=[out])


def test_dropout_probability():
    x = Tensor(float32, [N], Replicated, "x")
    with pytest.raises(VerifyError, match="dropout probability must be in \\[0, 1\\), got 1.5"):
        Dropout(x, 1.5)


def test_tensor_range():
    with pytest.raises(WorkbenchError, match="range must be \\(low, high\\) with low < high"):
        Tensor(float32, [N], Replicated, "v", range=(1.0, 0.0))


@pytest.mark.parametrize("bad", [(1.0, 0.0), (0.5,), 0.5, ("a", 1.0), (0.0, float("inf"))])
def test_variable_range(bad):
    with pytest.raises(WorkbenchError, match="^Variable beta1: range must be \\(low, high\\) "
                       "with low < high, both finite, got "):
        Variable(float32, "beta1", range=bad)


def test_a_variable_range_is_where_random_inputs_draw_it():
    from workbench.interpreter import random_inputs

    x = Tensor(float32, [N], Replicated, "x")
    step = Variable(float32, "step", range=(1.0, 10.0))
    lr = Variable(float32, "lr")
    program = Program(inputs=[x, step, lr], outputs=[Compute(x * step * lr)], name="ranged")
    draws = [random_inputs(program, {"N": 4, "P": 1}, seed) for seed in range(50)]
    assert all(1.0 <= float(d["step"]) < 10.0 for d in draws)
    assert max(float(d["step"]) for d in draws) > 5.0  # drawn over the range, not (0.5, 1)
    assert all(0.5 <= float(d["lr"]) < 1.0 for d in draws)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), 1e300, 10**400])
def test_a_constant_float32_cannot_hold_is_refused_with_its_line(value):
    """inf, nan and 1e300 passed check and simulate, then failed in nvcc (issue 40)."""
    x = Tensor(float32, [N], Local, "x")
    with pytest.raises(DTypeError) as e:
        x * value  # bad-constant
    assert str(e.value).startswith("a constant must be a finite number of at most 3.403e+38 "
                                   "in magnitude (float32's largest), got ")
    assert f"at {_line_of('# bad-constant')}; write the number a float32 holds" in str(e.value)


def test_a_large_finite_constant_passes():
    x = Tensor(float32, [N], Local, "x")
    where(x > 0, x, -1e30)
    maximum(x, 3.4e38)


def test_an_input_keeps_the_size_facts_it_was_declared_under():
    """A later Size of the same name (another program in the same session) leaves a program
    whose tensors were declared before it as written."""
    n = Size("N", multiple_of=P)
    x = Tensor(float32, [n], Local, "x")
    Size("N")  # another program's N, without the fact
    program = Program(inputs=[x], outputs=[ReduceScatter(Sum, x)], name="kept")
    assert dict(program.facts) == {n: P}
    Size("N", multiple_of=P)


def test_one_size_declared_two_ways_for_one_program_is_refused():
    x = Tensor(float32, [Size("N", multiple_of=P)], Local, "x")
    y = Tensor(float32, [Size("N", multiple_of=2 * P)], Local, "y")
    with pytest.raises(WorkbenchError, match="^Size N was declared with multiple_of=P for x "
                       "and multiple_of=2\\*P for y; declare each size once, before the "
                       "tensors that use it"):
        Program(inputs=[x, y], outputs=[x + y], name="twice")
    Size("N", multiple_of=P)
