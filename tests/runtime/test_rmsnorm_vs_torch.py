"""The CPU pieces of benchmarks/gpu/rmsnorm_vs_torch.py (the GPU script's comparison with
torch.compile): reading compile-and-measure's CSV, bandwidths and ratios, the tables, and
torch's result checked against the interpreter (where torch is installed)."""

import importlib.util

from conftest import ROOT


def _module():
    path = ROOT / "benchmarks/gpu/rmsnorm_vs_torch.py"
    spec = importlib.util.spec_from_file_location("rmsnorm_vs_torch", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_self_test_passes(tmp_path, capsys):
    _module().self_test(tmp_path)
    assert "self-test ok" in capsys.readouterr().out
    assert (tmp_path / "self-test.md").read_text().count("\n| ") == 3  # header + 2 rows


def test_sizes_parse_in_both_spellings():
    mod = _module()
    assert mod.parse_sizes("T=128 H=4096") == {"T": 128, "H": 4096}
    assert mod.parse_sizes("H=2^14,T=1") == {"H": 16384, "T": 1}
    assert mod.dtype_of("studies/rmsnorm.py") == "f16"
    assert mod.dtype_of("studies/rmsnorm.py:residual_bf16") == "bf16"
    assert mod.dtype_of("studies/rmsnorm.py:softmax_f16") is None


def test_variants_are_timed_beside_one_torch_time(tmp_path):
    mod = _module()
    assert mod.split_variant("b2=res/t.csv")[0] == "b2"
    csv_path = tmp_path / "wb.csv"
    csv_path.write_text("spec,program,sizes,P,schedule,kind,time_ms,spread_ms,min_ms,reps,check\n"
                        "studies/rmsnorm.py,p,T=8192 H=4096,1,fused,workbench,"
                        "0.2,0,0.2,100,ok\n")
    slow = tmp_path / "slow.csv"
    slow.write_text(csv_path.read_text().replace(",0.2,0,0.2,", ",0.3,0,0.3,"))
    rows = mod.workbench_rows(slow, "b1") + mod.workbench_rows(csv_path, "b2")
    for r in rows:
        r["torch_ms"] = 0.25
    (best,) = mod.best_rows(mod.table_rows(rows, "NVIDIA H100 80GB HBM3"))
    assert best["variant"] == "b2" and best["wb_over_torch"] == 0.2 / 0.25
    assert best["others_ms"] == "b1:0.3"


def test_a_row_kernels_grid_is_its_resident_blocks():
    from workbench.runtime.executor import resident_row_blocks

    # 512 threads: 98 registers (GPU run 24's residual kernel) fit one block a SM, 64 two
    # (__launch_bounds__(512, 2)), 40 three, 32 or fewer four (2048 threads); unknown: 4
    assert [resident_row_blocks(n) for n in (98, 64, 48, 40, 32, 26, None)] == \
        [1, 2, 2, 3, 4, 4, 4]
