"""CoCoNet's baseline by name: `ar-opt` (NCCL AllReduce, then the whole update as one fused
optimizer kernel) in the optimizer studies, priced at the bytes that kernel moves."""

import pytest
from plan_priced import kernel_steps

from codegen.lower import lower
from codegen.work import step_work
from workbench import ir
from workbench.interpreter import bind_sizes
from workbench.loader import load

N = 2**20


def _update_bytes_per_element(spec: str, schedule: str | None) -> float:
    loaded = load(spec)
    program = loaded.schedules[schedule].apply() if schedule else loaded.program
    bound = bind_sizes(program, {"N": N, "P": 4})
    plan = lower(program, 4)
    numel = {b.name: b.numel for b in plan.buffers}
    total = 0
    for k in kernel_steps(plan, "elementwise"):  # the update's kernels (the AllReduce: NCCL)
        w = step_work(k, 4, numel)
        total += (w.read_bytes + w.write_bytes).subs(bound)
    return float(total) / N


def test_ar_opt_adam_moves_28_bytes_per_element_where_three_kernels_move_40():
    # reads g, w, m, v and writes w, m, v once: 7 x 4 B; three kernels re-read m1 and v1
    # (the scalars lr, beta1, ... add a few bytes per kernel)
    assert _update_bytes_per_element("studies/adam.py", "ar-opt") == pytest.approx(28, rel=1e-4)
    assert _update_bytes_per_element("studies/adam.py", None) == pytest.approx(40, rel=1e-4)


@pytest.mark.parametrize("spec", ["studies/sgd.py", "studies/adam.py", "studies/lamb.py",
                                  "studies/adam.py:mixed", "studies/lamb.py:mixed"])
def test_every_optimizer_study_names_ar_opt_first_and_keeps_the_flat_allreduce(spec):
    loaded = load(spec)
    assert next(iter(loaded.schedules)) == "ar-opt"
    program = loaded.schedules["ar-opt"].apply()
    kinds = [type(s.op).__name__ for s in program.stmts]
    assert kinds[0] == "AllReduce" and "ReduceScatter" not in kinds


def test_lamb_ar_opt_fuses_each_run_of_elementwise_statements_around_its_norms():
    program = load("studies/lamb.py").schedules["ar-opt"].apply()
    kinds = [s.op.kind if isinstance(s.op, ir.Fused) else type(s.op).__name__
             for s in program.stmts]
    assert kinds == ["AllReduce", "compute", "Norm", "Norm", "Update"]
