"""benchmarks/harness.py: the suites file is well formed, every compile-and-measure run names
programs that load with sizes they have (the CLI's own front end, before any GPU work), every
command's script exists, and bad input exits 2 with one message."""

from __future__ import annotations

import importlib.util
import os
import sys
import time

import pytest
from conftest import ROOT

from workbench.cli.measure import job_sizes

spec = importlib.util.spec_from_file_location("harness", ROOT / "benchmarks/harness.py")
harness = importlib.util.module_from_spec(spec)
sys.modules["harness"] = harness
spec.loader.exec_module(harness)

SUITES = harness.load_suites()


def _runs(quick: bool, gpus: int = 2):
    """Every run of every suite, the replays' too."""
    return harness.plan_runs(SUITES, list(SUITES), gpus, ROOT / "out", quick)


@pytest.mark.parametrize("quick", [False, True])
def test_every_measure_run_has_valid_programs_and_sizes(quick):
    measured = [r for r in _runs(quick) if "compile-and-measure" in r.argv]
    assert measured
    for run in measured:
        argv = list(run.argv)
        first = argv.index("compile-and-measure") + 1
        if argv[first] == "--plan":  # a folder an earlier run of the suite compiles
            continue
        programs = argv[first:argv.index("--gpus")]
        sets = tuple(argv[i + 1] for i, a in enumerate(argv) if a == "--set")
        assert job_sizes(programs, sets), run.name


def test_every_command_names_a_file_that_exists():
    for run in _runs(False):
        if "compile-and-measure" in run.argv:
            continue
        scripts = [a for a in run.argv if a.endswith((".py", ".sh"))]
        # python's own -m (the interpreter's first option), not a pytest marker's
        modules = [run.argv[2]] if len(run.argv) > 2 and run.argv[1] == "-m" else []
        assert scripts or modules, run.name
        assert all((ROOT / s).is_file() for s in scripts), run.name
        assert all(importlib.util.find_spec(m) is not None for m in modules), run.name


def test_dry_run_prints_every_run(capsys):
    assert harness.main(["all", "--gpus", "1", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == sum(len(s.runs) for s in SUITES.values() if not s.records)


def test_unknown_suite_and_bad_gpu_count_exit_2(capsys):
    assert harness.main(["bogus", "--dry-run"]) == 2
    assert "suite must be one of" in capsys.readouterr().err
    assert harness.main(["allreduce", "--gpus", "0", "--dry-run"]) == 2
    assert "--gpus must be at least 1, got 0" in capsys.readouterr().err


def test_a_run_needing_more_gpus_is_skipped_and_recorded(tmp_path):
    run = harness.Run("link", "probe", (sys.executable, "-c", "raise SystemExit(3)"),
                      min_gpus=2)
    failing = harness.Run("x", "fails", (sys.executable, "-c", "raise SystemExit(3)"))
    records = harness.execute([run, failing], 1, tmp_path)
    assert records[0]["status"] == "skipped: needs 2 GPUs, got 1"
    assert records[1]["status"] == "failed" and records[1]["returncode"] == 3


def test_a_run_that_times_out_leaves_nothing_running(tmp_path):
    """The run's whole process group ends at its timeout, grandchildren included."""
    pid_file = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pid_file)!r}, 'w').write(str(c.pid)); time.sleep(60)")
    run = harness.Run("x", "hangs", (sys.executable, "-c", code), timeout_s=2)
    (record,) = harness.execute([run], 1, tmp_path)
    assert record["status"] == "timed out after 2 s"
    child = int(pid_file.read_text())
    for _ in range(50):  # the kill is asynchronous; the child is reaped by init
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"process {child} outlived the run")


@pytest.mark.parametrize("text, message", [
    ("[suites.a\n", "must be a readable TOML file of suites, got: "),
    ("suites = 3\n", "`suites` must be a table of [suites.NAME], got int"),
    ("[suites.a]\nruns = 3\n", "suite a in {path} must be a table with [[suites.a.runs]]"),
    ("[[suites.a.runs]]\nname = '../../x'\nprograms = ['studies/sgd.py']\n",
     "run a/../../x in {path}: name must be a plain name"),
    ("[[suites.a.runs]]\nprograms = ['studies/sgd.py']\n", "must have a name of its own"),
    ("[[suites.a.runs]]\nname = 'x'\nprograms = 'studies/sgd.py'\n",
     "programs must be a non-empty list of program files, got 'studies/sgd.py'"),
    ("[[suites.a.runs]]\nname = 'x'\nprograms = ['p.py']\ntimeout_s = 'ten'\n",
     "timeout_s must be a whole number of seconds from 1 to 86400, got 'ten'"),
    ("[[suites.a.runs]]\nname = 'x'\nprograms = ['p.py']\ntimeot_s = 10\n",
     "must have only the fields name, programs, command"),
    ("[[suites.a.runs]]\nname = 'x'\ncommand = ['{home}/x']\n",
     "command may fill in only {{gpus}}, {{out}}, {{python}}, got '{{home}}/x'"),
    ("[[suites.a.runs]]\nname = 'x'\ncommand = ['a']\n[[suites.b.runs]]\nname = 'x'\n"
     "command = ['b']\n", "run b/x in {path} must have a name of its own"),
    ("[suites.a]\nrecord = 3\n[[suites.a.runs]]\nname = 'x'\ncommand = ['a']\n",
     "suite a in {path}: `record` must be a records/ folder or a list of them, got 3"),
    ("[suites.a]\nrecord = ['records/gpu/x', 'studies']\n[[suites.a.runs]]\nname = 'x'\n"
     "command = ['a']\n", "`record` must be a records/ folder or a list of them, got ['records"),
])
def test_a_malformed_suites_file_exits_2_with_one_message(tmp_path, monkeypatch, capsys, text,
                                                          message):
    """A suites.toml that is not what it should be was 5 tracebacks (issue 40); a run named
    ../../x wrote its log outside --out."""
    path = tmp_path / "suites.toml"
    path.write_text(text)
    monkeypatch.setattr(harness, "SUITES_FILE", path)
    assert harness.main(["all", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message.format(path=path) in err and "Traceback" not in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("raw", [b"\xff\xfe[\x00s\x00", b"\x00" * 64])
def test_a_binary_suites_file_exits_2(tmp_path, monkeypatch, capsys, raw):
    path = tmp_path / "suites.toml"
    path.write_bytes(raw)
    monkeypatch.setattr(harness, "SUITES_FILE", path)
    assert harness.main(["--list"]) == 2
    assert f"{path} must be a readable TOML file of suites" in capsys.readouterr().err


def test_a_log_that_is_a_link_is_not_written_through(tmp_path):
    """A link planted under a run's log name was written through (issue 40): the run is
    recorded as not run, with the reason, and the rest go on."""
    target = tmp_path / "victim"
    target.write_text("keep")
    (tmp_path / "linked.log").symlink_to(target)
    runs = [harness.Run("x", "linked", (sys.executable, "-c", "print('x')")),
            harness.Run("x", "plain", (sys.executable, "-c", "print('y')"))]
    first, second = harness.execute(runs, 1, tmp_path)
    assert first["status"].startswith(f"not run: the output {tmp_path / 'linked.log'} must be "
                                      "a regular file or not exist yet, got a symlink")
    assert second["status"] == "ok" and target.read_text() == "keep"


def test_every_session_script_is_a_suite_now():
    """Issue 38 item 3: the recorded device calls are suites, no run_*.sh script remains, and
    every replay names a record that exists; `all` runs the benchmarks, never the replays."""
    assert not sorted(ROOT.glob("benchmarks/**/run_*.sh"))
    replays = [s for s in SUITES.values() if s.records]
    assert len(replays) >= 26
    for suite in replays:
        assert all((ROOT / folder).is_dir() for folder in suite.records), suite.name
    in_all = {r.suite for r in harness.plan_runs(SUITES, ["all"], 2, ROOT / "out", False)}
    assert in_all and not in_all & {s.name for s in replays}


def test_a_training_run_is_one_torchrun_a_variant_then_the_loss_check():
    tables = SUITES["replay-training"].training  # suites.toml's [train]
    suite = harness.Suite("t", "", ({"name": "tr", "train": "806m",
                                     "variants": ["ref", "plain", "wb-ovlsgp4"]},),
                          ("records/x",), tables)
    at2 = harness.plan_runs({"t": suite}, ["t"], 2, ROOT / "out", False)
    # plain is a one-GPU variant: left out at P = 2
    assert [r.name for r in at2] == ["tr-ref", "tr-wb-ovlsgp4", "tr-losses"]
    ref, cut, losses = (r.argv for r in at2)
    assert ref[:5] == ("torchrun", "--nproc_per_node=2", "examples/train_gpt.py", "--optimizer",
                       "torch")
    assert ref[-2:] == ("--out", str(ROOT / "out" / "2_806m_ref.json"))
    # the workbench's common arguments first; the graph cut every 4 blocks of 192 MB
    assert cut[3:9] == ("--optimizer", "workbench", "--zero", "--schedule", "fuse-rs-c-ag",
                        "--overlap")
    assert cut[cut.index("--split-mb") + 1] == "768"
    assert at2[1].timeout_s > at2[0].timeout_s  # the split scope compiles its pieces first
    assert losses == ("bash", "benchmarks/gpu/check_losses.sh", str(ROOT / "out"), "2", "806m")
    at1 = harness.plan_runs({"t": suite}, ["t"], 1, ROOT / "out", False)
    assert [r.name for r in at1] == ["tr-ref", "tr-plain", "tr-wb-ovlsgp4", "tr-losses"]
    # no reference among the variants: nothing to judge against, so no loss check is run
    # (check_losses.sh would say NOT JUDGED, exit 2)
    alone = harness.Suite("t", "", ({"name": "tr", "train": "806m", "variants": ["wb"]},),
                          ("records/x",), tables)
    assert [r.name for r in harness.plan_runs({"t": alone}, ["t"], 1, ROOT, False)] == ["tr-wb"]


@pytest.mark.parametrize("run, message", [
    ("train = 'big'\nvariants = ['ref']", "train must be one of 101m, 806m, got 'big'"),
    ("train = '806m'\nvariants = ['ref', 'fast']", "variants must name [train.variants.NAME] "
     "tables, got fast"),
    ("train = '806m'", "must have `variants` with `train` and only with it"),
    ("programs = ['p.py']\ntrain = '806m'\nvariants = ['ref']",
     "must have exactly one of `programs`, `command` or `train`"),
])
def test_a_malformed_training_run_exits_2(tmp_path, monkeypatch, capsys, run, message):
    train = (ROOT / "benchmarks/suites.toml").read_text().split("\n[train]\n", 1)[1]
    train = train.split("\n# ----", 1)[0]
    path = tmp_path / "suites.toml"
    path.write_text(f"[[suites.a.runs]]\nname = 'x'\n{run}\n\n[train]\n{train}")
    monkeypatch.setattr(harness, "SUITES_FILE", path)
    assert harness.main(["a", "--dry-run"]) == 2
    assert message in capsys.readouterr().err
