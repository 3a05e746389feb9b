"""Loop-invariant parts of elementwise expressions are computed once per thread: GPU run 14
timed Adam's w1 update, whose 1 - beta ** step was a double-precision pow per element."""

from codegen.lower import lower
from codegen.plan import KernelStep
from codegen.render import render
from workbench.loader import load


def _kernel(spec, stmt, schedule=None, P=2):
    loaded = load(spec)
    program = loaded.program if schedule is None else loaded.schedules[schedule].apply()
    step = next(s for s in lower(program, P).steps
                if isinstance(s, KernelStep) and stmt in s.stmts)
    return render(step.spec)


def _loop_body(src: str) -> str:
    return src[src.index("for (long long v0"):]


def test_adams_bias_corrections_leave_the_loop():
    for spec, schedule, stmt in [("studies/adam.py", None, "w1"),
                                 ("studies/adam.py", "fuse-rs-c-ag", "w1_s")]:
        src = _kernel(spec, stmt, schedule)
        hoisted = [line for line in src.splitlines() if "once per thread" in line]
        assert any("wb::pow_ref(s_beta1, s_step)" in line for line in hoisted), spec
        assert any("wb::pow_ref(s_beta2, s_step)" in line for line in hoisted), spec
        assert "pow_ref" not in _loop_body(src)


def test_per_element_and_random_expressions_stay_in_the_loop():
    src = _kernel("studies/model_parallel.py", "out")  # dropout(summed + b) + r
    assert "wb::dropout(" in _loop_body(src)
    assert "once per thread" not in src
