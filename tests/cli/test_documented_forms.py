"""Issue 39 item 1: every overlap form the README's table names is a schedule of a program that
`workbench check` (with --equivalence), `simulate` and `compile` take: generated and ranked,
never a traceback. An "elementwise kernel then an AllReduce, Broadcast or Reduce of it" whose
value is no Update's (stored nowhere else) raised KeyError in lowering before."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

from workbench import ir
from workbench.cli.main import main
from workbench.loader import load
from workbench.transforms.fusion import overlap_form

USERS = "tests/programs/users/"
# (form, consumer's op where the form has several, program file, schedule)
OVERLAPS = [
    ("matmul-allreduce", "AllReduce", USERS + "tp_swiglu_mlp.py", "overlap-mm-ar"),
    ("matmul-allreduce", "Fused", "studies/model_parallel.py", "overlap-mm-fuse-ar-c"),
    ("matmul-allreduce", "Fused", USERS + "tp_attn_out_layernorm.py",
     "overlap-mm-fuse-rs-c-ag"),
    ("matmul-reducescatter", "ReduceScatter", "studies/sequence_parallel.py", "overlap-mm-rs"),
    ("allgather-matmul", "MatMul", "studies/sequence_parallel.py", "overlap-ag-mm"),
    ("compute-collective", "AllReduce", USERS + "scaled_allreduce_overlap.py", "overlap-c-ar"),
    ("compute-collective", "Broadcast", USERS + "ps_overlap_update.py", "overlap-c-bcast"),
    ("compute-collective", "Reduce", USERS + "ps_overlap_update.py", "overlap-c-reduce"),
    ("compute-collective", "Broadcast", "studies/parameter_server.py", "overlap-c-bcast"),
    ("allreduce-send", "Fused", "studies/pipeline.py", "fuse-c-send-overlap-ar"),
    ("send-allgather", "AllGather", "studies/pipeline.py", "overlap-fuse-rs-c-send-ag"),
    ("alltoall-matmul", "MatMul", "studies/moe.py", "overlap-a2a-mm"),
    ("matmul-alltoall", "AllToAll", "studies/moe.py", "overlap-mm-a2a"),
]
FILES = sorted({spec for *_, spec, _ in OVERLAPS})


def _overlaps(program: ir.Program) -> list[tuple[str, str]]:
    return [(overlap_form(*s.op.body), type(s.op.body[1].op).__name__)
            for s in program.stmts if isinstance(s.op, ir.Overlapped)]


def test_every_documented_overlap_form_has_a_program():
    """The table above covers each form overlap_form knows, and each schedule holds its form."""
    from workbench.transforms.fusion import OVERLAP_FORMS_TEXT

    assert {form for form, *_ in OVERLAPS} == {
        "matmul-allreduce", "matmul-reducescatter", "allgather-matmul", "compute-collective",
        "allreduce-send", "send-allgather", "alltoall-matmul", "matmul-alltoall"}
    assert "an elementwise kernel then an AllReduce, Broadcast or Reduce" in OVERLAP_FORMS_TEXT
    for form, consumer, spec, name in OVERLAPS:
        program = load(str(ROOT / spec)).schedules[name].apply()
        assert (form, consumer) in _overlaps(program), (spec, name)


@pytest.mark.parametrize("spec", FILES)
def test_check_simulate_and_compile_take_every_overlap(spec, tmp_path, capsys):
    path = str(ROOT / spec)
    names = [name for *_, s, name in OVERLAPS if s == spec]
    assert main(["check", path, "--equivalence", "--ranks", "2"]) == 0
    js = tmp_path / "sim.json"
    assert main(["simulate", path, "--json", str(js)]) == 0
    rows = {r["schedule"]: r for r in json.loads(js.read_text())}
    for name in names:
        assert not (rows[name].get("note") or ""), rows[name]  # ranked: generated, on the cluster
    out = tmp_path / "compiled"
    P = rows["unscheduled"]["sizes"]["P"] * len(load(path).program.groups())
    assert main(["compile", path, "--gpus", str(P), "--schedule", ",".join(names),
                 "--no-nvcc", "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    status = {e["schedule"]: e["status"] for e in manifest["schedules"]}
    assert all(status[n] == "generated" for n in names), status
    capsys.readouterr()
