"""The fused AllReduce + residual + RMSNorm forms on GPUs and their CUDA-graph timing (issue
25): which plans a graph can replay (CPU), and on a GPU every schedule checked eagerly and
after graph replays (marked gpu; skipped without one)."""

from pathlib import Path

import pytest
from conftest import gpu_params

from codegen.lower import lower
from codegen.plan import KernelStep, NcclStep
from workbench.loader import load
from workbench.runtime.graphs import graph_problem
from workbench.runtime.launches import KernelLaunch, LibraryCall, NcclCall
from workbench.runtime.worker import _baseline_kind

ROOT = Path(__file__).resolve().parents[2]
STUDY = str(ROOT / "studies/allreduce_rmsnorm.py")


class _Run:
    """What graph_problem reads of a PlanRun: its prepared launches (PlanRun.prepare's
    typed launches, workbench.runtime.launches)."""

    def __init__(self, plan):
        self.launches = []
        for step in plan.steps:
            if isinstance(step, NcclStep):
                self.launches.append(NcclCall(step, 0, 0, 0))
            elif isinstance(step, KernelStep):
                kinds = [p.kind for p in step.spec.params]
                epoch = kinds.index("epoch") if "epoch" in kinds else None
                self.launches.append(KernelLaunch(step, None, 1, [], epoch))
            else:
                self.launches.append(LibraryCall(lambda: None))


@pytest.mark.parametrize("name", ["unscheduled", "rs-c-ag", "fuse-rs-c-ag", "nccl-fuse-c",
                                  "fuse-ar-c", "fuse-ar-c-pipelined", "fuse-ar-c-oneshot",
                                  "fuse-ar-c-lamport"])
def test_every_allreduce_rmsnorm_schedule_can_be_graphed(name):
    f = load(STUDY)
    prog = f.program if name == "unscheduled" else f.schedules[name].apply()
    assert graph_problem(_Run(lower(prog, P=2))) == ""


def test_a_kernel_with_an_epoch_argument_is_not_graphed():
    f = load(str(ROOT / "studies/sgd.py"))
    plan = lower(f.schedules["fuse-rs-c-ag"].apply(), P=2)
    problem = graph_problem(_Run(plan))
    assert problem.startswith("kernel wb_collective_p2_") and problem.endswith(
        "takes its barrier epoch as an argument, which a graph would replay frozen")


def test_the_study_has_its_torch_baselines():
    assert _baseline_kind(load(STUDY).program) == ("allreduce_rmsnorm", "f16")
    assert _baseline_kind(load(STUDY + ":bf16").program) == ("allreduce_rmsnorm", "bf16")


@pytest.mark.parametrize("P", gpu_params())
def test_every_schedule_checks_eagerly_and_graphed_on_gpus(P):
    from workbench.runtime.job import run_job

    # H = 1000: the scalar path (rows not 16-byte vectors); H = 4096 the vector path
    res = run_job([STUDY], P, [{"T": 4 * P, "H": 1000}, {"T": 4 * P, "H": 4096}], "all", 20,
                  2, False, 60.0, graph=True)
    rows = [r for r in res["records"] if r["kind"] == "workbench"]
    graphed = [r for r in rows if r["schedule"].endswith("(cuda graph)")]
    assert len(graphed) == len(rows) // 2 == 2 * 8
    for r in rows:
        assert r["check"].startswith("ok"), (r["schedule"], r["sizes"], r["check"])
