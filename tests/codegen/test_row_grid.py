"""The "rows" form of row kernels (CodegenOptions.row_grid = "rows", off by default; design
note 91): the option, what the kernels render, the launch shape the runtime picks (threads by
the row's length, a block a row), the longest row it takes, and the benchmark's variant."""

import dataclasses
import sys

import pytest
from conftest import ROOT

from codegen.lower import lower
from codegen.plan import KernelStep, row_cols_fault
from codegen.render import render
from codegen.spec import ROWS_CACHE, ROWS_MAX_THREADS, THREADS
from workbench.errors import WorkbenchError
from workbench.loader import load
from workbench.options import CodegenOptions
from workbench.runtime.executor import rows_grid, rows_threads

ROWS = CodegenOptions(row_grid="rows")


def _row_spec(spec_path: str, schedule: str, P: int = 1, options=None):
    pf = load(str(ROOT / spec_path))
    plan = lower(pf.schedules[schedule].apply(), P, options)
    (spec,) = [k for k in plan.kernels() if k.row is not None]
    return spec


def test_the_option_is_checked_and_read_from_the_environment_and_the_cli():
    assert CodegenOptions().row_grid == "resident"
    assert CodegenOptions.from_env({"WB_ROW_GRID": "rows"}).row_grid == "rows"
    assert CodegenOptions().with_settings(["row_grid=rows"]) == ROWS
    assert ROWS.changed() == {"row_grid": "rows"}
    with pytest.raises(WorkbenchError, match=r"--codegen row_grid must be one of \('resident', "
                                             r"'rows'\) \(a row kernel's shape.*got 'wide'"):
        CodegenOptions().with_settings(["row_grid=wide"])
    with pytest.raises(WorkbenchError, match=r"WB_ROW_GRID must be one of"):
        CodegenOptions.from_env({"WB_ROW_GRID": "1"})


@pytest.mark.parametrize("spec_path,schedule", [
    ("studies/allreduce_rmsnorm.py", "fuse-ar-c-oneshot"),
    ("studies/rmsnorm.py:residual_f16", "fused"),
])
def test_the_default_is_the_resident_form_and_keeps_its_names(spec_path, schedule):
    default = _row_spec(spec_path, schedule)
    explicit = _row_spec(spec_path, schedule, options=CodegenOptions(row_grid="resident"))
    assert default == explicit and default.row.grid == "resident"
    assert default.row.max_threads == THREADS and "grid=" not in repr(default.row)
    assert "__launch_bounds__(512, 2)" in render(default)


def test_the_rows_form_holds_16_elements_a_thread_under_a_1024_thread_bound():
    spec = _row_spec("studies/rmsnorm.py:residual_f16", "fused", options=ROWS)
    row = spec.row
    assert (row.grid, row.cache, row.min_blocks) == ("rows", ROWS_CACHE, 2) == ("rows", 16, 2)
    assert row.max_threads == ROWS_MAX_THREADS == 1024
    src = render(spec)
    assert "__launch_bounds__(1024, 2)" in src and "constexpr int K = 16;" in src
    assert "one row a block" in src
    assert spec.name != _row_spec("studies/rmsnorm.py:residual_f16", "fused").name
    # nothing cached (softmax reloads its input): no cache, the same bound
    softmax = _row_spec("studies/rmsnorm.py:softmax_bf16", "fused", options=ROWS)
    assert softmax.row.cache == 0 and "__launch_bounds__(1024, 2)" in render(softmax)


def test_one_block_a_sm_bound_is_the_rows_form_at_64_registers():
    mb1 = _row_spec("studies/rmsnorm.py:residual_f16", "fused",
                    options=CodegenOptions(row_grid="rows", row_min_blocks=1))
    assert mb1.row.min_blocks == 1 and "__launch_bounds__(1024, 1)" in render(mb1)
    # 3 or 4 blocks of 1024 threads cannot be resident: the bound stays 2
    mb4 = _row_spec("studies/rmsnorm.py:residual_f16", "fused",
                    options=CodegenOptions(row_grid="rows", row_min_blocks=4))
    assert mb4.row.min_blocks == 2


@pytest.mark.parametrize("schedule", ["fuse-ar-c-oneshot", "fuse-ar-c", "fuse-rs-c-ag"])
def test_one_rank_meets_no_peer_two_ranks_keep_their_barriers(schedule):
    one = render(_row_spec("studies/allreduce_rmsnorm.py", schedule, 1, ROWS))
    assert "block_barrier" not in one and "no peer to meet" in one
    two = render(_row_spec("studies/allreduce_rmsnorm.py", schedule, 2, ROWS))
    assert two.count("wb::block_barrier<2>(flags, rank,") == 2
    # the resident form keeps its barriers at one rank too (the defaults are unchanged)
    assert "wb::block_barrier<1>" in render(_row_spec("studies/allreduce_rmsnorm.py",
                                                      schedule, 1))


def test_two_shot_at_one_rank_orders_its_summed_rows_by_a_block_barrier():
    src = render(_row_spec("studies/allreduce_rmsnorm.py", "fuse-ar-c", 1, ROWS))
    assert src.count("__syncthreads();  // this block's summed rows stored before") == 1


@pytest.mark.parametrize("cols,cache,threads", [
    (4096, 16, 256), (8192, 16, 512), (16384, 16, 1024), (1001, 16, 64), (1000, 16, 64),
    (1, 16, 32), (512, 16, 32), (513, 16, 64), (100000, 0, 1024), (4096, 0, 256),
])
def test_threads_hold_the_row_at_the_cache_a_thread(cols, cache, threads):
    assert rows_threads(cols, cache) == threads
    assert threads * (cache or ROWS_CACHE) >= cols or threads == ROWS_MAX_THREADS


def test_a_block_a_row_but_a_resident_grid_where_blocks_meet_peers():
    assert rows_grid(8192, 256, False, 132) == 8192
    assert rows_grid(0, 256, False, 132) == 1
    # P >= 2: every block resident (2048 threads a SM), within the flags' 1024 blocks
    assert rows_grid(8192, 1024, True, 132) == 264
    assert rows_grid(8192, 256, True, 132) == 1024
    assert rows_grid(128, 512, True, 132) == 128
    # bound 1 (64 registers): 1024 threads a SM resident
    assert rows_grid(8192, 1024, True, 132, 1) == 132
    assert rows_grid(8192, 512, True, 132, 1) == 264


def test_the_longest_row_is_what_1024_threads_hold():
    spec = _row_spec("studies/rmsnorm.py:residual_f16", "fused", options=ROWS)
    step = KernelStep(spec, ("h", "out"), "", 4, "H")
    assert row_cols_fault(step, 16384) is None
    assert "rows must have at most 16384 elements (its threads keep 16 each" in (
        row_cols_fault(step, 16385))
    resident = dataclasses.replace(step, spec=_row_spec("studies/rmsnorm.py:residual_f16",
                                                        "fused"))
    assert "at most 16384 elements (its threads keep 32" in row_cols_fault(resident, 16385)


def test_the_benchmark_driver_times_the_form_as_a_variant(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks" / "gpu"))
    import rows_bandwidth as rb

    assert rb.parse_variant("rows") == {"row_grid": "rows"}
    assert rb.parse_variant("as-is") == {}
    assert rb.parse_variant("rows-mb1") == {"row_grid": "rows", "row_min_blocks": 1}
    with pytest.raises(SystemExit, match=r"shared<1-4>, rows, mb<1-4> joined by '-', got 'wide'"):
        rb.parse_variant("wide")
    pf = load(str(ROOT / "studies/allreduce_rmsnorm.py"))
    plan = rb.lowered(pf.schedules["fuse-ar-c-oneshot"].apply(), {"row_grid": "rows"})
    assert plan.options == ROWS
    assert [k.row.grid for k in plan.kernels()] == ["rows"]
    sys.modules.pop("rows_bandwidth", None)
