"""Issue 39 item 6: the commands that work for seconds talk. On a terminal, `check
--equivalence`, `compile`, `simulate` (--full) and `simulate-step` draw a progress bar on
stderr naming the schedule under way; with --quiet, or where stderr is no terminal (a log, a
pipe, CI), they draw nothing; stdout is the same byte for byte either way."""

from __future__ import annotations

import pytest
from conftest import ROOT

from workbench.cli import outputs
from workbench.cli.main import main

PS = str(ROOT / "tests/programs/users/ps_overlap_update.py")
COMMANDS = {
    "check": (["check", PS, "--equivalence", "--ranks", "2"], "equivalence:"),
    "compile": (["compile", PS, "--gpus", "2", "--no-nvcc", "--out", "{tmp}/c"],
                "compile: lowering"),
    "simulate": (["simulate", PS, "--full", "--set", "N=2**20"], "simulating"),
    "simulate-step": (["simulate-step", "--d-model", "256", "--layers", "2", "--heads", "4",
                       "--batch", "2", "--hardware", "h100x8"], "simulate-step h100x8 x1:"),
}


def _run(argv, tmp_path, capsys):
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 0
    got = capsys.readouterr()
    # compile names its folder on stdout: the same folder each run
    return got.out, got.err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bar_on_a_terminal_none_elsewhere_and_the_same_stdout(command, tmp_path, capsys,
                                                               monkeypatch):
    argv, what = COMMANDS[command]
    plain_out, plain_err = _run(argv, tmp_path, capsys)  # stderr is no terminal here
    assert what not in plain_err
    monkeypatch.setattr(outputs, "stderr_is_terminal", lambda: True)
    out, err = _run(argv, tmp_path, capsys)
    assert what in err and out == plain_out
    quiet_out, quiet_err = _run([*argv, "--quiet"], tmp_path, capsys)
    assert what not in quiet_err and quiet_out == plain_out
    assert quiet_err == plain_err  # the warnings stay; only the bar goes


def test_compile_counts_the_kernels_nvcc_compiles(tmp_path, capsys, monkeypatch):
    import shutil

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc (CUDA toolkit) not installed")
    monkeypatch.setenv("WB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(outputs, "stderr_is_terminal", lambda: True)
    assert main(["compile", PS, "--gpus", "2", "--schedule", "overlap-c-bcast",
                 "--out", str(tmp_path / "c")]) == 0
    assert "compile: nvcc" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["simulate", PS],
    ["simulate-step", "--d-model", "256", "--layers", "2", "--heads", "4", "--batch", "2",
     "--hardware", "h100x8"]])
def test_every_file_written_is_said_in_one_line(argv, tmp_path, capsys):
    files = {"--csv": tmp_path / "t.csv", "--json": tmp_path / "t.json",
             "--trace": tmp_path / "trace.json"}
    assert main([*argv, *(a for k, f in files.items() for a in (k, str(f)))]) == 0
    err = capsys.readouterr().err.splitlines()
    for f in files.values():
        (line,) = [e for e in err if e.startswith(f"wrote {f}: ")]
        assert f.exists()
    assert any(e.endswith("rows (CSV)") for e in err) and any("ui.perfetto.dev" in e for e in err)
