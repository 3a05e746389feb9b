"""The row cache in shared memory (codegen.lower_rows.ROW_CACHE_SHARED, off by default; design
note 86): which row kernels take it, what they render, the collective's grid, and nvcc's
register and spill figures for the kernels it was made for (skipped without nvcc)."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

import codegen.lower_rows as lr
from codegen.lower import lower
from codegen.render import include_dir, render
from codegen.spec import THREADS
from workbench.loader import load
from workbench.runtime.executor import collective_grid


def _row_spec(spec_path: str, schedule: str, P: int = 1):
    pf = load(str(ROOT / spec_path))
    plan = lower(pf.schedules[schedule].apply(), P=P)
    (spec,) = [k for k in plan.kernels() if k.row is not None]
    return spec


@pytest.fixture
def shared(monkeypatch):
    monkeypatch.setattr(lr, "ROW_CACHE_SHARED", True)


def test_off_by_default_the_cache_stays_in_registers():
    spec = _row_spec("studies/rmsnorm.py:residual_f16", "fused")
    assert spec.row.cache_in == "registers" and spec.row.min_blocks == 2
    assert "__shared__" not in render(spec) and "wb::RowCache<__half, K>" in render(spec)


def test_a_16_bit_row_goes_to_shared_memory_with_three_blocks_a_sm(shared):
    spec = _row_spec("studies/rmsnorm.py:residual_f16", "fused")
    row = spec.row
    assert row.cache_in == "shared"
    assert row.min_blocks == lr.ROW_SHARED_MIN_BLOCKS == 3 and row.grid_per_sm == 0
    assert lr.shared_cache_bytes(row) == 2 * lr.ROW_CACHE * THREADS == 32768
    src = render(spec)
    assert "__launch_bounds__(512, 3)" in src
    assert "__shared__ __align__(16) __half k_r_h_row[K * 512];" in src
    # stored at its columns in pass 0, read back at the same columns in pass 1, both paths
    assert src.count("wb::store_vec<V>(k_r_h + c, r_h);") == 1
    assert src.count("wb::load_vec<V>(k_r_h + c, r_h);") == 1
    assert src.count("wb::load_vec<1>(k_r_h + c, r_h);") == 1
    assert "wb::RowCache" not in src and "k < K / V" not in src  # no unrolled register cache


def test_rows_that_do_not_fit_keep_the_register_cache(shared):
    # an f32 row of 16384 is 64 KB, over the 40 KB a block may declare beside its reductions
    f32 = _row_spec("studies/rmsnorm.py:residual_f32", "fused")
    assert lr.shared_cache_bytes(f32.row) == 65536 and f32.row.cache_in == "registers"
    assert f32.row.min_blocks == 2
    # nothing cached: nothing to move (softmax reloads its input)
    softmax = _row_spec("studies/rmsnorm.py:softmax_bf16", "fused")
    assert softmax.row.cache == 0 and softmax.row.cache_in == "registers"


def test_a_row_collective_launches_as_many_blocks_as_its_bound_keeps(shared, monkeypatch):
    spec = _row_spec("studies/allreduce_rmsnorm.py", "fuse-ar-c-oneshot")
    assert spec.kind == "collective" and spec.row.cache_in == "shared"
    assert spec.row.grid_per_sm == spec.row.min_blocks == 3
    assert collective_grid(spec, 2, 132) == 396
    # the register cache: the options' blocks a SM, as before
    monkeypatch.setattr(lr, "ROW_CACHE_SHARED", False)
    before = _row_spec("studies/allreduce_rmsnorm.py", "fuse-ar-c-oneshot")
    assert before.row.grid_per_sm == 0 and collective_grid(before, 2, 132) == 264
    assert before.name != spec.name  # the cubin cache keeps them apart


NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc"
                                if Path("/usr/local/cuda/bin/nvcc").exists() else None)


@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) not installed")
@pytest.mark.parametrize("spec_path,schedule", [
    ("studies/rmsnorm.py:residual_f16", "fused"),
    ("studies/rmsnorm.py:residual_bf16", "fused"),
    ("studies/allreduce_rmsnorm.py", "fuse-ar-c-oneshot"),
    ("studies/allreduce_rmsnorm.py:bf16", "fuse-ar-c-oneshot"),
    ("studies/allreduce_rmsnorm.py", "fuse-ar-c"),
    ("studies/allreduce_rmsnorm.py", "fuse-rs-c-ag"),
])
def test_ptxas_keeps_the_shared_cache_kernels_in_40_registers_without_spills(
        shared, spec_path, schedule, tmp_path):
    # at P = 1 (what one GPU runs); bound 4 (32 registers) spills a few bytes at P >= 2 and in
    # the Lamport kernel's single-element path, bound 3 nowhere here (design note 86)
    spec = _row_spec(spec_path, schedule)
    src = tmp_path / "k.cu"
    src.write_text(render(spec))
    out = subprocess.run([NVCC, "-arch=sm_90", "-cubin", f"-I{include_dir()}", "-Xptxas", "-v",
                          str(src), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True, check=True).stderr
    regs = int(re.search(r"Used (\d+) registers", out).group(1))
    spills = int(re.search(r"(\d+) bytes spill stores", out).group(1))
    assert regs <= 40 and spills == 0, out
    assert re.search(r"3302\d bytes smem", out), out  # 32 KB of cache + the reductions'
