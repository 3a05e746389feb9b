"""The cost of axis reductions (row kernels): the input read once, one value per row written,
one combine per element; inside a fused collective, computation on the rank's rows."""

import pytest
from plan_priced import kernel_steps, priced

from codegen.lower import lower
from codegen.work import step_work
from cost_model.hardware import preset
from workbench import ir
from workbench.interpreter import bind_sizes


def test_a_row_statistic_reads_its_rows_once_and_writes_one_value_per_row(study):
    f = study("studies/allreduce_rmsnorm.py")
    T, H = 64, 4096
    bound = bind_sizes(f.program, {"T": T, "H": H, "P": 4})
    plan = lower(f.program, 4)
    (stat,) = [s.name for s in f.program.stmts if isinstance(s.op, ir.ReduceAxis)]
    (kernel,) = [k for k in kernel_steps(plan) if k.stmts == (stat,)]
    work = step_work(kernel, 4, {b.name: b.numel for b in plan.buffers})
    # h (f16) read, the f32 mean of each row written
    assert (work.read_bytes + work.write_bytes).subs(bound) == T * H * 2 + T * 4
    assert work.write_bytes.subs(bound) == T * 4
    # Cast(h) * Cast(h): 3 operations, plus the combine into the row's accumulator
    assert work.flops.subs(bound) == 4 * T * H


@pytest.mark.parametrize("T", [128, 8192])
def test_the_fused_schedule_is_priced_below_the_unscheduled_program_on_nvlink(study, T):
    f = study("studies/allreduce_rmsnorm.py")
    cluster = preset("h200x4")
    sizes = {"T": T, "H": 8192, "P": 4}

    def cost(p):
        return float(priced(p, cluster, bind_sizes(p, sizes)).time_s)

    assert cost(f.schedules["fuse-rs-c-ag"].apply()) < cost(f.program)
