"""CoCoNet's own fused collective across nodes (transforms.RingFuse): the update inside NCCL's
ring, priced on NCCL's ring plan (cost_model.ops.network_fused) and simulated on the same
plan; lowering refuses it ("simulated only: needs a fused network collective") and
`workbench simulate` shows its row with that note and never marks it best."""

import json

import pytest

from codegen.lower import SIMULATED_ONLY, lower
from codegen.plan import RingFusedStep
from codegen.plan_file import plan_from_record, plan_json
from cost_model import collectives as coll
from cost_model.hardware import preset
from cost_model.ops import work_s
from cost_model.plan_cost import PlanContext, fused_parts_of, plan_cost
from simulator import simulate
from workbench import ir
from workbench.cli.simulate import Prediction, table
from workbench.errors import IllegalTransform, RuntimeFault
from workbench.interpreter import assert_equivalent, bind_sizes
from workbench.loader import load
from workbench.placement import Placement
from workbench.transforms import RingFuse
from workbench.verify import verify


def _ring(spec="studies/adam.py"):
    return load(spec).schedules["fuse-rs-c-ag-ring"].apply()


def test_the_ring_form_is_the_fused_allreduce_on_nccls_ring_and_computes_the_same():
    loaded = load("studies/adam.py")
    program = _ring()
    (region,) = [s for s in program.stmts if isinstance(s.op, ir.Fused)]
    assert region.op.engine == "ring" and str(region.op) == "FusedAllreduce[NCCL ring]"
    assert_equivalent(loaded.program, program, {"N": 48, "P": 4}, 3)
    # NCCL's ring carries it across nodes: the verifier does not refuse it on 8 nodes
    verify(program, Placement.of("dgx2-v100", 8, 16, {"N": 2**20, "P": 128}))


def test_lamb_has_no_ring_form_and_illegal_cases_are_pinned():
    assert "fuse-rs-c-ag-ring" not in load("studies/lamb.py").schedules
    lamb = load("studies/lamb.py").schedules["fuse-rs-c-ag"].apply()
    region = next(s for s in lamb.stmts if isinstance(s.op, ir.Fused)).outs[0].name
    with pytest.raises(IllegalTransform, match=r"a ring-fused collective must hold no norm"):
        RingFuse(region).apply(lamb)
    sgd = load("studies/sgd.py").program
    assert RingFuse("g1").check(sgd).reason == (
        "ring-fuse(g1): 'g1' must be a FusedAllreduce whose kernel moves its bytes, got "
        "AllReduce(Sum, g); fuse ReduceScatter + update + AllGather first")


@pytest.mark.parametrize("N", [2**20, 2**26])
def test_priced_as_nccls_ring_allreduce_plus_the_unhidden_update(N):
    cluster = preset("dgx2-v100", nodes=8)
    program = _ring()
    bound = bind_sizes(program, {"N": N, "P": 128})
    pc = PlanContext.of(lower(program, 128, priced_only=True), cluster, bound)
    (step,) = [s for s in pc.plan.steps if isinstance(s, RingFusedStep)]
    ring = min((p for p in coll.plans("allreduce", 4.0 * N, 128, cluster, 128)
                if p.algorithm == "ring"), key=lambda p: p.time_s)
    tail = work_s(cluster, fused_parts_of(pc, step.kernel).work) / 8
    model = float(plan_cost(pc.plan, cluster, bound).time_s)
    assert model == pytest.approx(ring.time_s + tail, rel=0.02)
    sim = simulate(program, cluster, bound, record=False).time_s
    assert sim == pytest.approx(model, rel=1e-6)


def test_lowering_refuses_it_saying_it_is_simulated_only():
    with pytest.raises(RuntimeFault, match=SIMULATED_ONLY):
        lower(_ring(), 4)


@pytest.mark.parametrize("N", [2**20, 2**26])
def test_its_plan_step_is_priced_and_simulated_as_the_ring(N):
    """Lowered for pricing (priced_only), the region is a RingFusedStep: NCCL's ring on the
    bytes of its peers-form kernel plus the unhidden update, as the statement's price; the
    simulator runs the step; the plan says why it never runs (decision 104)."""
    cluster = preset("dgx2-v100", nodes=8)
    program = _ring()
    bound = bind_sizes(program, {"N": N, "P": 128})
    plan = lower(program, 128, priced_only=True)
    (step,) = [s for s in plan.steps if isinstance(s, RingFusedStep)]
    assert plan.refusal == step.refused and SIMULATED_ONLY in step.refused
    assert step.kernel.spec not in plan.kernels()  # it describes the form: never compiled
    priced = float(plan_cost(plan, cluster, bound).time_s)
    sim = simulate(program, cluster, bound, record=False, plan=plan).time_s
    assert sim == pytest.approx(priced, rel=1e-6)


def test_its_plan_round_trips_through_plan_json():
    plan = lower(_ring(), 4, priced_only=True)
    assert plan_from_record(json.loads(plan_json(plan))) == plan


def test_simulate_never_marks_a_simulated_only_row_best_even_when_fastest():
    def pred(name, t, refused=""):
        return Prediction(name, None, t, t, t, "nvlink", object(), not_generated=refused)

    df = table([pred("unscheduled", 3.0), pred("ar-opt", 2.0),
                pred("fuse-rs-c-ag-ring", 1.0, SIMULATED_ONLY)])
    best = df.loc[df["best"] == "*", "schedule"].tolist()
    assert best == ["ar-opt"]
    assert SIMULATED_ONLY in df.loc[2, "note"] and df.loc[2, "vs_ar_opt"] == 2.0


def test_the_simulate_row_says_simulated_only(tmp_path):
    import pandas as pd
    from click.testing import CliRunner

    from workbench.cli.simulate import simulate as simulate_cmd

    csv = tmp_path / "t.csv"
    out = CliRunner().invoke(simulate_cmd, ["studies/adam.py", "--hardware", "dgx2-v100",
                                            "--nodes", "2", "--set", "N=2**20", "--csv",
                                            str(csv)])
    assert out.exit_code == 0, out.output
    row = pd.read_csv(csv).set_index("schedule").loc["fuse-rs-c-ag-ring"]
    assert row["time_ms"] > 0 and SIMULATED_ONLY in row["note"] and row["best"] != "*"
