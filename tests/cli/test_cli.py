"""The CLI: exit 0 on good programs, exit 2 with one clear message on bad ones."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, STUDY_SPECS

from workbench.cli.main import main

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"


def run_cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("spec", STUDY_SPECS)
def test_check_every_study(capsys, spec):
    code, out, _ = run_cli(capsys, "check", str(ROOT / spec.split(":")[0]) +
                           (":" + spec.split(":")[1] if ":" in spec else ""))
    assert code == 0 and "ok" in out


def test_show_adam_prints_the_program(capsys):
    code, out, _ = run_cli(capsys, "show", str(ROOT / "studies/adam.py"))
    assert code == 0
    assert out.startswith("program adam(N, P) where N % P == 0")
    assert "g1 = AllReduce(Sum, g)" in out and "out w1, m1, v1" in out


def test_show_a_schedule(capsys):
    code, out, _ = run_cli(capsys, "show", str(ROOT / "studies/sgd.py"), "--schedule",
                           "fuse-rs-c-ag")
    assert code == 0 and "FusedAllreduce {" in out


def test_unknown_schedule(capsys):
    code, _, err = run_cli(capsys, "show", str(ROOT / "studies/sgd.py"), "--schedule", "nope")
    assert code == 2
    assert "--schedule must name a schedule of" in err
    assert "known: ar-opt, fuse-rs-c-ag, fuse-rs-c-ag-ring, rs-c-ag" in err


def test_missing_file(capsys):
    code, _, err = run_cli(capsys, "check", "no/such/file.py")
    assert code == 2
    assert err.startswith("error: program file must exist, got no file at no/such/file.py")


def test_file_that_raises_names_the_line(capsys):
    code, _, err = run_cli(capsys, "check", str(PROGRAMS / "raises.py"))
    assert code == 2
    assert "got NameError: name 'undefined_name' is not defined at" in err
    assert "raises.py:5" in err
    assert "Traceback" not in err


def test_file_without_program(capsys):
    code, _, err = run_cli(capsys, "show", str(PROGRAMS / "no_program.py"))
    assert code == 2
    assert "must bind a Program to `program`, got nothing; end it with `program = Program(" in err


def test_bad_layout_names_op_and_line(capsys):
    code, _, err = run_cli(capsys, "check", str(PROGRAMS / "bad_layout.py"))
    assert code == 2
    assert "AllReduce(Sum, w): input must be Local, got Replicated" in err
    assert "bad_layout.py:5" in err


def test_debug_shows_the_traceback():
    proc = subprocess.run([sys.executable, "-m", "workbench", "--debug", "check",
                           str(PROGRAMS / "no_program.py")], capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_schedules_lists_named_and_autotuned(capsys, tmp_path):
    out_json = tmp_path / "c.json"
    code, out, _ = run_cli(capsys, "schedules", str(ROOT / "studies/sgd.py"), "--autotune",
                           "--json", str(out_json))
    assert code == 0
    assert "rs-c-ag" in out and "split+reorder+fuse  = fuse-rs-c-ag" in out
    code, out, _ = run_cli(capsys, "schedules", str(ROOT / "studies/sgd.py"), "--replay",
                           str(out_json))
    assert code == 0 and "split+reorder+fuse: ok" in out


def test_console_script_installed():
    proc = subprocess.run(["workbench", "check", str(ROOT / "studies/sgd.py")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# Every program file shipped in studies/ (the modules that hold no program are helpers)
HELPERS = {"__init__.py", "optimizer_schedules.py", "sweep.py"}
SHIPPED = sorted(p.name for p in (ROOT / "studies").glob("*.py") if p.name not in HELPERS)


@pytest.mark.parametrize("name", SHIPPED)
def test_check_every_shipped_program_file(capsys, name):
    """Two of them failed `check` before: the pipelined hierarchy (an overlap of three legs,
    where check looked for a producer and a consumer) and elementwise_ops (one `sizes` for
    programs of [N] and of [T, H])."""
    code, out, err = run_cli(capsys, "check", str(ROOT / "studies" / name))
    assert code == 0 and " ok" in out, err


def test_a_file_size_no_program_has_is_named(capsys, tmp_path):
    f = tmp_path / "typo.py"
    f.write_text("from workbench import *\nN = Size('N')\n"
                 "g = Tensor(float32, [N], Local, 'g')\n"
                 "program = Program(inputs=[g], outputs=[AllReduce(Sum, g)])\n"
                 "sizes = {'N': 2**20, 'n': 4}\n")
    code, _, err = run_cli(capsys, "check", str(f))
    assert code == 2
    assert err == (f"error: `sizes` in {f} must name sizes of its programs, got n; known: N, "
                   "P\n")
