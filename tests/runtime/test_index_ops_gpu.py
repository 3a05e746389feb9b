"""The index kernels on GPUs (issue 39 item 2, design decision 106; marked gpu, skipped
without one): every schedule of the vocab-parallel embedding (the gather kernel, NCCL's
AllReduce or the fused reduce-scatter + scale + all-gather) and of the MoE router (the top-k
kernels, warp per row) is run on P ranks with its outputs poisoned first (NaN in every buffer
a run must write) and checked against the interpreter's bounded reference."""

import pytest
from conftest import ROOT, gpu_params


@pytest.mark.parametrize("P", gpu_params())
@pytest.mark.parametrize("spec, sizes", [
    # 64 vocabulary rows: the ids drawn in [-2, 64) fall in every rank's rows and outside
    # all of them; H = 264 leaves a tail past any vector width
    ("studies/vocab_parallel_embedding.py", [{"V": 64, "H": 264, "T": 8 * 4 * 8},
                                              {"V": 64 * 8, "H": 4096, "T": 2048}]),
    # rows not a multiple of a block's 16 warps; ties unlikely in random f32 probabilities
    ("studies/moe_router.py", [{"T": 8 * 131, "H": 256}, {"T": 16384, "H": 1024}]),
])
def test_index_kernels_check_against_the_interpreter(spec, sizes, P):
    from workbench.runtime.job import run_job

    res = run_job([str(ROOT / spec)], P, sizes, "all", 20, 2, False, 120.0)
    rows = [r for r in res["records"] if r["kind"] == "workbench"]
    assert len(rows) == len({r["schedule"] for r in rows}) * len(sizes) >= 3 * len(sizes)
    for r in rows:
        assert r["check"].startswith("ok"), (r["schedule"], r["sizes"], r["check"])
