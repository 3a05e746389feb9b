"""Every kernel rendered for the studies compiles with nvcc for sm_90 (skipped without nvcc)."""

import shutil
from pathlib import Path

import pytest
from codegen_cases import CASES, case_mode, case_options, case_program

from codegen.lower import lower
from codegen.render import include_dir, render
from workbench.errors import RuntimeFault

pytestmark = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
    reason="nvcc (CUDA toolkit) not installed")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rendered_kernels_compile(case, cubin_cache):
    from workbench.runtime.compiler import compile_cubin

    plan = lower(case_program(case), case[3], case_options(case),
                 collective_mode=case_mode(case))
    kernels = plan.kernels()
    assert kernels, "each case generates at least one kernel"
    for spec in kernels:
        cubin = compile_cubin(spec.name, render(spec), include_dir())
        assert cubin.stat().st_size > 0
        assert spec.name.encode() in cubin.read_bytes()


def test_a_kernel_that_fails_to_compile_names_the_source(tmp_path, monkeypatch):
    from workbench.runtime.compiler import compile_cubin

    monkeypatch.setenv("WB_CACHE_DIR", str(tmp_path))
    with pytest.raises(RuntimeFault, match=r"(?s)kernel wb_bad must compile with nvcc, got exit "
                                           r"code \d+:.*the rendered source is at .*wb_bad-"):
        compile_cubin("wb_bad", 'extern "C" __global__ void wb_bad() { undefined_thing(); }',
                      include_dir())
