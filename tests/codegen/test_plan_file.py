"""plan.json (codegen.plan_file): a lowered plan written as data loads back into the same Plan
(steps, buffers, locations, kernel specs and names, options, the program it was lowered from);
a file of another format version, or one that would make the reader run code, is refused with
the reason and the fix (issue 38: lowered once, shipped as is)."""

import json

import pytest
from conftest import ROOT

from codegen.lower import lower
from codegen.plan_file import (
    PLAN_FORMAT_VERSION,
    PlanFileError,
    load_plan,
    plan_file_record,
    plan_from_record,
    plan_json,
)
from workbench.errors import WorkbenchError
from workbench.loader import load
from workbench.options import CodegenOptions
from workbench.transforms import CopyEngines

# every plan step class among them: kernels (streaming, rows, collectives), NCCL, GEMMs with
# epilogues, reductions, overlaps, copy engines, chunked Sends, pipelines, a node's view
SPECS = ["studies/adam.py", "studies/adam.py:mixed", "studies/lamb.py", "studies/moe.py",
         "studies/model_parallel.py", "studies/sequence_parallel.py",
         "studies/allreduce_rmsnorm.py", "studies/pipeline.py", "studies/pipeline_hierarchy.py",
         "studies/kernel_ops.py:reductions",
         "tests/programs/users/tp_swiglu_mlp.py",
         # the index kernels (spec.IndexPlan: issue 39 item 2, design decision 106)
         "studies/vocab_parallel_embedding.py", "studies/moe_router.py"]


def _plans(spec: str, P: int):
    pf = load(str(ROOT / spec))
    programs = [("unscheduled", pf.program)]
    for name, sched in pf.schedules.items():
        try:
            programs.append((name, sched.apply()))
        except WorkbenchError:
            pass
    for name, program in programs:
        try:  # the ring-fused form's plan too: its RingFusedStep is data like any step
            yield name, lower(program, P, priced_only=True)
        except WorkbenchError:  # not lowered: nothing to write
            pass


def _loads_back(plan, name):
    back = plan_from_record(json.loads(plan_json(plan)))
    assert back == plan, name  # steps, buffers, groups, options, origins, the program
    assert back.locs == plan.locs, name  # (not part of a Plan's equality)
    assert [k.name for k in back.kernels()] == [k.name for k in plan.kernels()], name


@pytest.mark.parametrize("spec", SPECS)
def test_every_plan_loads_back_as_itself(spec):
    plans = list(_plans(spec, 4))
    assert plans
    for name, plan in plans:
        _loads_back(plan, name)


def test_a_copy_engine_plan_loads_back_as_itself():
    fused = load(str(ROOT / "studies/adam.py")).schedules["fuse-rs-c-ag"].apply()
    _loads_back(lower(CopyEngines("g1_rs", 8).apply(fused), 4, CodegenOptions(unroll=2)),
                "copy engines")


def _adam_record():
    return plan_file_record(lower(load(str(ROOT / "studies/adam.py")).program, 2))


def test_a_plan_of_another_version_is_refused_with_the_reason_and_the_fix(tmp_path):
    record = _adam_record()
    record["version"] = PLAN_FORMAT_VERSION + 1
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(record))
    with pytest.raises(PlanFileError) as e:
        load_plan(path)
    assert str(e.value) == (
        f"{path} must be of plan format version {PLAN_FORMAT_VERSION} (this workbench's), got "
        f"version {PLAN_FORMAT_VERSION + 1}; compile the program again with this workbench "
        "(workbench compile), or run it with the workbench that wrote it")
    assert isinstance(e.value, WorkbenchError)  # the CLI's one message, exit 2


def test_what_is_not_a_plan_file_is_refused(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text('{"P": 2, "steps": []}')  # the old, read-only dump
    with pytest.raises(PlanFileError, match=r"must be a workbench-plan file, got no format field; "
                                            r"write it with workbench compile$"):
        load_plan(path)
    path.write_text("{")
    with pytest.raises(PlanFileError, match=r"^a plan file must be readable JSON, got "):
        load_plan(path)


@pytest.mark.parametrize("expr", ["__import__('os').system('true')", "N.__class__",
                                  "open('x')", "N[0]", "lambda: 1"])
def test_a_size_expression_is_data_never_code(expr):
    record = _adam_record()
    text = json.dumps(record).replace('{"expr": "N"}', json.dumps({"expr": expr}), 1)
    with pytest.raises(PlanFileError, match=r"field plan\.program\.inputs\[0\]\.type\.shape"
                                            r"\[0\]\.expr must be a size expression of at "
                                            r"most 1000 characters: .*, got a node of type"):
        plan_from_record(json.loads(text))


def test_a_record_of_an_unknown_class_is_refused():
    text = json.dumps(_adam_record()).replace('"class": "NcclStep"', '"class": "Popen"', 1)
    with pytest.raises(PlanFileError, match=r"field plan\.steps\[0\]\.class must be the name "
                                            r"of a record class of codegen.plan_file, got an "
                                            r"unknown name; compile the program again"):
        plan_from_record(json.loads(text))
