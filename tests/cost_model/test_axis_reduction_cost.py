"""The cost of axis reductions (row kernels): the input read once, one value per row written,
one combine per element; inside a fused collective, computation on the rank's rows."""

import pytest

from cost_model.hardware import preset
from cost_model.ops import elementwise_work, program_cost
from cost_model.ops.context import CostContext
from workbench import ir
from workbench.interpreter import bind_sizes


def test_a_row_statistic_reads_its_rows_once_and_writes_one_value_per_row(study):
    f = study("studies/allreduce_rmsnorm.py")
    T, H = 64, 4096
    ctx = CostContext(f.program, preset("h200x4"), bind_sizes(f.program, {"T": T, "H": H,
                                                                          "P": 4}))
    (stat,) = [s for s in f.program.stmts if isinstance(s.op, ir.ReduceAxis)]
    work = elementwise_work(ctx, [stat])
    assert work.hbm_bytes == T * H * 2 + T * 4  # h (f16) read, the f32 mean of each row written
    assert work.write_bytes == T * 4
    # Cast(h) * Cast(h): 3 operations, plus the combine into the row's accumulator
    assert work.flops == 4 * T * H


@pytest.mark.parametrize("T", [128, 8192])
def test_the_fused_schedule_is_priced_below_the_unscheduled_program_on_nvlink(study, T):
    f = study("studies/allreduce_rmsnorm.py")
    cluster = preset("h200x4")
    sizes = {"T": T, "H": 8192, "P": 4}

    def cost(p):
        return float(program_cost(p, cluster, bind_sizes(p, sizes)).time_s)

    assert cost(f.schedules["fuse-rs-c-ag"].apply()) < cost(f.program)
