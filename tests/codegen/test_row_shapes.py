"""The two shapes of a row kernel's loop that stay knobs (design note 80): loads of several
column steps issued first (lower_rows.ROW_LOADS_IN_FLIGHT) and row groups (ROW_GROUPS). Off by
default, so every kernel keeps its text and its name; on, they render and compile. On one H100
they were checked against the interpreter (records/gpu/h100x1-rows-bandwidth-p1/) and
were slower at T = 8192, which is why they are off."""

import shutil
from pathlib import Path

import pytest

import codegen.lower_rows as lr
from codegen.lower import lower
from codegen.render import include_dir, render
from codegen.spec import Load, RowPass

NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()


def _oneshot(study, P, dtype="f16"):
    f = study("studies/allreduce_rmsnorm.py" + (":bf16" if dtype == "bf16" else ""))
    (step,) = lower(f.schedules["fuse-ar-c-oneshot"].apply(), P=P).steps
    return step.spec


def _pass(*loads):
    return RowPass(tuple(loads), (), (), ())


def test_the_knobs_are_off_and_leave_kernel_names_alone(study):
    assert lr.ROW_LOADS_IN_FLIGHT == 0 and lr.ROW_GROUPS is False
    spec = _oneshot(study, 1)
    assert [p.depth for p in spec.row.passes] == [1, 1] and not spec.row.groups
    # the new fields are left out of the key at their defaults: names (and cubins) as before
    assert "depth=" not in spec.key() and "groups=" not in spec.key()
    text = render(spec)
    assert "wb::row_group" not in text and "k0 +=" not in text
    assert "for (long long row = blockIdx.x; row < rows; row += gridDim.x) {" in text


def test_load_depth_counts_peer_loads_and_halves_to_the_budget():
    contig = Load("a_r", "__half", "contig", "p_r")
    reduce2 = Load("a_s", "__half", "reduce", "", peers=("p0", "p1"))
    assert lr.load_depth(_pass(contig, contig), 4, 8) == 4  # 2 loads a step, 4 steps
    assert lr.load_depth(_pass(reduce2, contig), 4, 8) == 2  # 3 a step: 2 steps = 6 <= 8
    assert lr.load_depth(_pass(reduce2, reduce2, reduce2, contig), 4, 8) == 1
    assert lr.load_depth(_pass(contig, contig), 4, 0) == 1  # off
    assert lr.load_depth(_pass(), 4, 8) == 1  # nothing to hoist


def test_the_knobs_on_render_loads_first_and_row_groups(study, monkeypatch):
    off = _oneshot(study, 2)
    monkeypatch.setattr(lr, "ROW_LOADS_IN_FLIGHT", 8)
    monkeypatch.setattr(lr, "ROW_GROUPS", True)
    spec = _oneshot(study, 2)
    # pass 0 loads y from 2 peers and r (3 a step: 2 steps at a time), pass 1 the weight alone
    assert [p.depth for p in spec.row.passes] == [2, 4] and spec.row.groups
    assert spec.name != off.name and "depth=2" in spec.key() and "groups=True" in spec.key()
    text = render(spec)
    assert "const wb::RowGroup grp = wb::row_group(cols, K);" in text
    assert "k0 += 2" in text and "k0 += 4" in text
    assert "wb::row_finish<wb::kRowMean>(acc_r_t0, cols, grp)" in text
    # the single-element path keeps one step at a time, with the group's threads
    assert "const long long c = (grp.t + static_cast<long long>(k) * grp.n) * 1;" in text


@pytest.mark.skipif(not NVCC, reason="nvcc (CUDA toolkit) not installed")
@pytest.mark.parametrize("P", [1, 2])
def test_the_knob_variants_compile(study, monkeypatch, cubin_cache, P):
    from workbench.runtime.compiler import compile_cubin

    monkeypatch.setattr(lr, "ROW_LOADS_IN_FLIGHT", 8)
    monkeypatch.setattr(lr, "ROW_GROUPS", True)
    f = study("studies/allreduce_rmsnorm.py:bf16")
    for name in ("fuse-ar-c-oneshot", "fuse-ar-c", "fuse-ar-c-lamport", "fuse-rs-c-ag"):
        plan = lower(f.schedules[name].apply(), P=P)
        for spec in plan.kernels():
            assert compile_cubin(spec.name, render(spec), include_dir()).stat().st_size > 0
