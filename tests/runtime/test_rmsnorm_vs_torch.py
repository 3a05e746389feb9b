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
    assert mod.dtype_of("benchmarks/gpu/rmsnorm.py") == "f16"
    assert mod.dtype_of("benchmarks/gpu/rmsnorm.py:residual_bf16") == "bf16"
    assert mod.dtype_of("benchmarks/gpu/rmsnorm.py:softmax_f16") is None
