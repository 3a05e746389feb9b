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
    (tmp_path / "sweep").mkdir()
    rows = records_index.index_text(tmp_path).splitlines()
    assert rows[-2] == ("| [gpu/run1](gpu/run1/) | Run 1: a \\| pipe | GPU x2 | 2026-01-02 | "
                        "abcdef1 | 1 |")
    assert rows[-1] == "| [sweep](sweep/) | - | - | - | - | 0 |"


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
