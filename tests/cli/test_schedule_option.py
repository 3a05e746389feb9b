"""`--schedule` given more than once names every schedule (it kept only the last, silently:
a GPU call of this session measured one schedule of three)."""

import json
from pathlib import Path

from click.testing import CliRunner

from workbench.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]


def test_repeated_schedule_options_add_up(tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["compile", str(ROOT / "studies/allreduce_rmsnorm.py"),
                                   "--gpus", "2", "--out", str(out), "--no-nvcc",
                                   "--schedule", "fuse-ar-c", "--schedule",
                                   "fuse-ar-c-pipelined,fuse-ar-c-oneshot"])
    assert res.exit_code == 0, res.output
    names = [e["schedule"] for e in json.loads((out / "manifest.json").read_text())["schedules"]]
    assert names == ["unscheduled", "fuse-ar-c", "fuse-ar-c-pipelined", "fuse-ar-c-oneshot"]
