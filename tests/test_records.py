"""The records live apart from the package (issue 38 item 3): an index that cannot drift, no
measured file inside a package folder, and no command that writes inside the package by
default."""

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("workbench", "cost_model", "simulator", "codegen", "studies", "wbtorch")


def test_the_records_index_is_current():
    done = subprocess.run([sys.executable, "benchmarks/records_index.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_index_names_every_record_folder(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import records_index
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    (tmp_path / "gpu" / "run1").mkdir(parents=True)
    (tmp_path / "gpu" / "run1" / "README.md").write_text("# Run 1: a | pipe\n")
    (tmp_path / "gpu" / "run1" / "r.json").write_text(json.dumps(
        {"meta": {"device": "GPU", "P": 2, "date": "2026-01-02T03:04", "commit": "abcdef123",
                  "command": "workbench compile-and-measure x.py"}, "records": []}))
    (tmp_path / "gpu" / "run1" / "bad.json").write_bytes(b"\xff not json")
    (tmp_path / "gpu" / "h200x4-run9").mkdir()
    (tmp_path / "gpu" / "h200x4-run9" / "README.md").write_text("# Run 9 (2026-02-03): no JSON\n")
    (tmp_path / "h200x8").mkdir()  # a top-level folder named after the preset it predicted on
    rows = records_index.index_text(tmp_path, {"gpu/run1": ["replay-one", "replay-two"]})
    rows = rows.splitlines()
    assert rows[-3] == ("| [gpu/h200x4-run9](gpu/h200x4-run9/) | Run 9 (2026-02-03): no JSON | "
                        "H200 x4 (name) | 2026-02-03 (README) | - | README |")
    assert rows[-2] == ("| [gpu/run1](gpu/run1/) | Run 1: a \\| pipe | GPU x2 | 2026-01-02 | "
                        "abcdef1 | `replay-one`, `replay-two` |")
    assert rows[-1] == "| [h200x8](h200x8/) | - | - | - | - | README |"


def test_every_replay_suite_is_in_the_index():
    index = (ROOT / "records/README.md").read_text()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import records_index
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    named = [s for suites in records_index.replays().values() for s in suites]
    assert len(named) > 20
    assert [s for s in named if f"`{s}`" not in index] == []


def test_no_measured_results_inside_the_package():
    tracked = subprocess.run(["git", "ls-files", *PACKAGES], cwd=ROOT, capture_output=True,
                             text=True).stdout.split()
    if not tracked:  # not a git checkout (an unpacked sdist): nothing to check
        return
    results = []
    for name in tracked:
        if name.endswith(".json") and "/data/" not in name:
            try:
                data = json.loads((ROOT / name).read_text(encoding="utf-8"))
            except ValueError:
                continue
            if isinstance(data, dict) and "meta" in data and "records" in data:
                results.append(name)
        if name.endswith((".command.txt", ".workbench.lock")) or "/results/" in name:
            results.append(name)
    assert not results, f"measured results inside the package: {results[:5]}"


def test_compile_and_measure_writes_into_the_current_folder_by_default():
    from workbench.cli.main import cli

    help_text = CliRunner().invoke(cli, ["compile-and-measure", "--help"]).output
    assert "workbench-out/measured" in help_text
    assert "records/" not in help_text and "studies/" not in help_text.split("--out")[1][:200]


def writing_options():
    """(command, option) for every option of every workbench command that names where output
    goes (an --out, --log, --trace or --report option), lazily loaded commands included."""
    import click

    from workbench.cli.main import cli

    ctx = click.Context(cli)
    found, todo = [], [((), cli)]
    while todo:
        path, cmd = todo.pop()
        if isinstance(cmd, click.Group):
            todo += [((*path, n), cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)]
            continue
        found += [(" ".join(path), opt) for opt in cmd.params if isinstance(opt, click.Option)
                  and any(o.startswith(("--out", "--log", "--trace", "--report"))
                          for o in opt.opts)]
    return found


def outside_the_package(default: str) -> bool:
    """A relative path (the current folder) whose first part is neither a package nor records/."""
    path = Path(default)
    return not path.is_absolute() and path.parts[0] not in (*PACKAGES, "records")


def test_no_command_writes_inside_the_package_by_default():
    options = writing_options()
    assert any(cmd == "compile-and-measure" for cmd, _ in options)  # the walk found commands
    for cmd, opt in options:
        if opt.required or opt.is_flag or not isinstance(opt.default, str | Path):
            continue  # the user names it (no default), or a flag (--trace-all) names no path
        assert outside_the_package(str(opt.default)), f"{cmd} {opt.opts[0]}: {opt.default}"
        assert opt.show_default, f"{cmd} {opt.opts[0]} must state its default in --help"


def test_the_harness_and_the_coconet_benchmark_write_into_the_current_folder():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import coconet_128gpu
        import harness
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    for default in (harness.DEFAULT_OUT, coconet_128gpu.OUT):
        assert outside_the_package(str(default)) and default.parts[0] == "workbench-out"
    help_text = subprocess.run([sys.executable, "benchmarks/harness.py", "--help"], cwd=ROOT,
                               capture_output=True, text=True).stdout
    assert "default ./workbench-out/harness" in help_text


def test_every_replayed_record_readme_names_its_suites():
    """A record's README says which harness suites re-run it (where the folder has a README;
    the early runs without one are told in records/gpu/README.md)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import records_index
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    unnamed = []
    for folder, suites in records_index.replays().items():
        readme = ROOT / "records" / folder / "README.md"
        text = readme.read_text() if readme.is_file() else (ROOT / "records/gpu/README.md"
                                                             ).read_text()
        unnamed += [f"{folder}: {s}" for s in suites if s not in text]
    assert unnamed == []
