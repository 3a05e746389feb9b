"""A compiled folder (`workbench compile --out D`) read back by `compile-and-measure --plan D`
(issue 40): its manifest.json, program.json and plan.json files are data checked by schemas,
bounded, never read through a link, a FIFO or a folder, never sent out of D by a name, and a
size expression cannot make the reader compute for minutes. Each case is exit 2 with one line
naming the file and the field, before any GPU work, and quoting nothing of the file."""

import json
import os

import pytest

from codegen.compiled import read_compiled
from codegen.plan_file import PlanFileError
from workbench.cli.main import main

SECRET = "SECRET-TOKEN-42"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("c") / "sgd"
    assert main(["compile", "studies/sgd.py", "--gpus", "2", "--out", str(folder), "--no-nvcc",
                 "--quiet"]) == 0
    return folder


def _copy(compiled, tmp_path):
    import shutil

    return shutil.copytree(compiled, tmp_path / "sgd")


def _edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _refused(folder, capsys) -> str:
    """compile-and-measure's one-line refusal of `folder` (exit 2, no traceback)."""
    code = main(["compile-and-measure", "--plan", str(folder), "--gpus", "2", "--out",
                 str(folder.parent / "res")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert SECRET not in err
    return err


def test_a_compiled_folder_reads_back(compiled):
    c = read_compiled(compiled)
    assert c.P == 2 and "unscheduled" in c.names


@pytest.mark.parametrize("change, message", [
    (lambda m: m["schedules"][1].update(folder="../../x"),
     "field schedules[1].folder must be a schedule folder's name (letters, digits, _ . + -; no "
     "leading dot), got a string"),
    (lambda m: m.pop("spec"), "field spec must be the program file's name, got nothing"),
    (lambda m: m.update(gpus=f"{SECRET}"), "field gpus must be a positive integer, got a string"),
    (lambda m: m.update(P=0), "field P must be a positive integer, got a number < 1"),
    (lambda m: m["schedules"][0].update(status=SECRET),
     "field schedules[0].status must be one of generated, illegal, not generated, got another "
     "string"),
    (lambda m: m["schedules"][0].pop("kernels"),
     "field schedules[0].kernels must be a list of kernel names, got nothing"),
    (lambda m: m.update(codegen={"options": {SECRET: 1}}),
     f"field codegen.options.{SECRET} must be one of the known fields"),
])
def test_a_bad_manifest_is_one_line_naming_the_field(compiled, tmp_path, capsys, change,
                                                     message):
    folder = _copy(compiled, tmp_path)
    _edit(folder / "manifest.json", change)
    err = _refused(folder, capsys) if SECRET not in message else None
    with pytest.raises(PlanFileError) as e:
        read_compiled(folder)
    assert f"--plan's manifest {folder / 'manifest.json'} {message}" in str(e.value)
    assert err is None or message in err


@pytest.mark.parametrize("name", ["manifest.json", "program.json", "unscheduled/plan.json"])
@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder", "huge"])
def test_no_file_of_it_is_a_link_a_fifo_a_folder_or_huge(compiled, tmp_path, capsys, name,
                                                          kind):
    folder = _copy(compiled, tmp_path)
    path = folder / name
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"format": "workbench-plan", "token": SECRET}))
    path.unlink()
    if kind == "symlink":
        path.symlink_to(secret)
    elif kind == "fifo":
        os.mkfifo(path)  # a reader that opened it would block forever
    elif kind == "folder":
        path.mkdir()
    else:
        with open(path, "wb") as f:
            f.truncate(64 << 20 | 1)  # sparse: past every limit, nothing to parse
    err = _refused(folder, capsys)
    want = {"symlink": "got a symlink", "fifo": "got a FIFO", "folder": "got a folder",
            "huge": "must be at most"}[kind]
    assert str(path) in err and want in err


def _first_size(x):
    """The first size expression record ({"expr": "N"}) of a plan file's record."""
    if isinstance(x, dict):
        if x.get("expr") == "N":
            return x
        x = list(x.values())
    for v in x if isinstance(x, list) else ():
        found = _first_size(v)
        if found is not None:
            return found
    return None


@pytest.mark.parametrize("expr, got", [
    ("9**9**9**9", "got a larger exponent"),
    ("(" * 5000 + "N" + ")" * 5000, "got a string too long"),
    (f"N + {SECRET}", "got a name that is no symbol of the file"),
    ("N.__class__", "got a node of type Attribute"),
])
def test_a_size_expression_is_bounded_data(compiled, tmp_path, capsys, expr, got):
    """9**9**9**9 would have sympy compute a number of 10^8 digits and more while loading."""
    folder = _copy(compiled, tmp_path)
    plan = folder / "unscheduled" / "plan.json"
    _edit(plan, lambda record: _first_size(record).update(expr=expr))
    err = _refused(folder, capsys)
    assert f"{plan} field plan." in err and ".expr must be a size expression" in err
    assert got in err


@pytest.mark.parametrize("text, got", [
    ("[" * 100_000 + "]" * 100_000, "nesting too deep"),
    ('{"format": "workbench-plan", "version": 2, "symbols": {"N": {"integer": "yes"}}, '
     '"plan": {"class": "Plan"}}', "field symbols.N.integer must be true or false, got a string"),
    ('{"format": "workbench-plan", "version": 2, "symbols": {}, "plan": {"class": "Plan", '
     f'"P": {{"enum": "{SECRET}"}}}}}}', "field plan.P must be a record"),
    ('{"format": "workbench-plan", "version": "' + SECRET + '"}',
     "got a version that is not an integer"),
    ("\x89PNG\r\n\x1a\n\x00\xff", "bytes that are not UTF-8"),
])
def test_a_plan_file_that_is_not_one(compiled, tmp_path, capsys, text, got):
    folder = _copy(compiled, tmp_path)
    plan = folder / "unscheduled" / "plan.json"
    plan.write_bytes(text.encode("latin-1"))
    err = _refused(folder, capsys)
    assert str(plan) in err and got in err
