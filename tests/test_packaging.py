"""The package as a user installs it: the wheel holds the design's import names only, ships the
CUDA templates and calibration data, and leaves the repository's results out; the layer
contracts name every module of the core."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

TOP_LEVEL = {"workbench", "cost_model", "simulator", "codegen", "studies", "wbtorch"}


def source_copy(dest: Path) -> Path:
    """The files git would commit (tracked, or new and not ignored), copied to `dest`: a wheel
    built in the checkout would also pick up a stale build/ folder."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for name in listed:
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> list[str]:
    out = tmp_path_factory.mktemp("dist")
    src = source_copy(tmp_path_factory.mktemp("src"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    str(src)], check=True, capture_output=True)
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_wheel_holds_the_design_import_names_only(wheel_names):
    tops = {n.split("/")[0] for n in wheel_names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == TOP_LEVEL


def test_wheel_ships_templates_and_data_not_results(wheel_names):
    names = set(wheel_names)
    templates = {p.relative_to(ROOT).as_posix() for p in (ROOT / "codegen/cuda").rglob("*")
                 if p.is_file()}
    assert templates and templates <= names
    assert {"cost_model/data/nccl_h200x4.csv", "cost_model/data/adam_h200x4.csv"} <= names
    assert "studies/adam.py" in names and "workbench/__main__.py" in names
    assert not [n for n in wheel_names if n.startswith("records/")]
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith("LICENSE")
               for n in wheel_names)


def test_layer_contract_names_every_core_module():
    """A new module of `workbench` must be placed in a layer: the core's list in
    pyproject.toml, or one of the two upper floors."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    named = {m.strip() for layer in layers for m in layer.replace("|", ":").split(":")}
    modules = {f"workbench.{p.stem if p.is_file() else p.name}"
               for p in (ROOT / "workbench").iterdir()
               if (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
               or (p.is_dir() and (p / "__init__.py").exists())}
    assert modules - named == set(), "place these modules in pyproject.toml's layer contract"


def test_version_and_module_entry_point():
    done = subprocess.run([sys.executable, "-m", "workbench", "--version"], capture_output=True,
                          text=True, cwd=Path("/"))
    assert done.returncode == 0 and done.stdout.startswith("workbench, version ")
