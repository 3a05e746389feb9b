"""`simulate --explain` reads plans (issue 38 item 1): each NCCL step of a generated schedule's
plan, an overlap's and a pipeline's legs included, with NCCL's pick for it as the price reads
it (cost_model.plan_explain); a schedule priced only (the ring-fused form) reads its plan
too, whose ring is fused: no NCCL call of its own (decision 104)."""

from codegen.lower import lower
from cost_model.hardware import preset
from cost_model.plan_explain import plan_collectives
from workbench.cli.simulate import predict
from workbench.interpreter import bind_sizes
from workbench.loader import load


def _rows(spec, schedule, P, cluster, sizes):
    loaded = load(spec)
    program = loaded.schedules[schedule].apply()
    return plan_collectives(lower(program, P), cluster, bind_sizes(program, sizes))


def test_each_nccl_step_of_the_plan_is_a_row():
    rows = _rows("studies/adam.py", "rs-c-ag", 16, preset("dgx-h100", nodes=2),
                 {"N": 2**28, "P": 16})
    assert [(r["stmt"], r["kind"], r["ranks"], r["nodes"]) for r in rows] == [
        ("g1_rs", "reducescatter", 16, 2), ("m1", "allgather", 16, 2),
        ("v1", "allgather", 16, 2), ("w1", "allgather", 16, 2)]
    # nccl-tests' buffer convention: the whole 1 GiB tensor for both
    assert {r["nbytes"] for r in rows} == {2**30}
    assert all(r["algorithm"] == "ring" and r["time_s"] > 0 for r in rows)


def test_a_fused_kernel_calls_no_nccl_nor_does_the_ring_fused_plan():
    preds = {p.name: p for p in predict(load("studies/adam.py"), preset("h200x4"), {})}
    assert preds["fuse-rs-c-ag"].collectives == ()
    ring = preds["fuse-rs-c-ag-ring"]  # not generated: its plan's RingFusedStep calls no NCCL
    assert ring.not_generated and ring.collectives == ()
    assert [c["stmt"] for c in preds["ar-opt"].collectives] == ["g1"]
