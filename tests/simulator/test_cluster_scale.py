"""The simulator at cluster scale: collectives across nodes as NCCL's tuning model prices them
(tests/cost_model/test_cross_node.py checks the closed forms), simulated by representatives,
and `workbench simulate --explain` naming NCCL's pick."""

import pytest
from click.testing import CliRunner
from plan_priced import priced

from cost_model.collectives import choose_plan
from cost_model.hardware import preset
from simulator import simulate
from workbench.cli.simulate import simulate as simulate_cmd
from workbench.interpreter import bind_sizes
from workbench.loader import load

N = 2**28  # 1 GiB of f32 gradients


@pytest.mark.parametrize("gpus", [1024, 16384])
def test_simulated_allreduce_is_the_closed_form(gpus):
    program = load("studies/sgd.py").program
    cluster = preset("dgx-h100", nodes=gpus // 8)
    bound = bind_sizes(program, {"N": N, "P": gpus})
    cost = priced(program, cluster, bound)
    plan = choose_plan("allreduce", 4 * N, gpus, cluster, gpus)
    assert float(cost.stmts[0].time_s) == pytest.approx(float(plan.time_s), rel=1e-9)
    result = simulate(program, cluster, bound)
    assert result.reduced
    assert result.time_s == pytest.approx(float(cost.time_s), rel=0.01)


def test_the_answer_grows_with_the_gpu_count():
    program = load("studies/sgd.py").program
    times = []
    for gpus in (8, 64, 1024, 16384):
        bound = bind_sizes(program, {"N": N, "P": gpus})
        times.append(simulate(program, preset("dgx-h100", nodes=gpus // 8), bound).time_s)
    assert times == sorted(times) and len(set(times)) == 4


def test_explain_names_the_algorithm_and_protocol():
    out = CliRunner().invoke(simulate_cmd, ["studies/sgd.py", "--hardware", "dgx-h100",
                                            "--nodes", "128", "--set", "N=2**28",
                                            "--explain"])
    # NVLSTree since dgx-h100 has NVLink SHARP (NCCL 2.30's model; design note 38)
    assert out.exit_code == 0, out.output
    assert ("g1 = allreduce over 1024 ranks on 128 node(s): nvlstree/Simple, nic-bound"
            in out.output)


# ---------------------------------------------------------------- only runnable schedules


@pytest.mark.parametrize("spec, schedule", [("studies/adam.py", "fuse-rs-c-ag"),
                                            ("studies/sgd.py", "fuse-rs-c-ag"),
                                            ("studies/model_parallel.py",
                                             "overlap-mm-fuse-ar-c")])
def test_fused_across_domains_is_not_on_this_cluster(spec, schedule):
    from workbench.errors import NotOnThisCluster

    loaded = load(spec)
    program = loaded.schedules[schedule].apply()
    cluster = preset("dgx-h100", nodes=8)
    bound = bind_sizes(program, {**loaded.sizes, "P": 64})
    with pytest.raises(NotOnThisCluster) as e:
        priced(program, cluster, bound)
    assert "kernel (peer loads and stores over NVLink) must keep its group inside one NVLink " \
        "domain of 8 GPUs, got a group of 64 GPUs over 8 nodes of dgx-h100*8" in str(e.value)
    assert "NCCL collectives (a schedule without fuse, e.g. rs-c-ag)" in str(e.value)
    # inside one domain the same schedule runs
    bound8 = bind_sizes(program, {**loaded.sizes, "P": 8})
    assert priced(program, cluster, bound8).time_s > 0


def test_simulate_never_marks_a_fused_schedule_best_across_nodes():
    out = CliRunner().invoke(simulate_cmd, ["studies/adam.py", "--hardware", "dgx-h100",
                                            "--nodes", "8", "--set", "N=2**28"])
    assert out.exit_code == 0, out.output
    rows = {line.split()[0]: line for line in out.output.splitlines()[1:] if line.strip()}
    assert "not on dgx-h100*8: a fused allreduce kernel" in rows["fuse-rs-c-ag"]
    assert " * " not in rows["fuse-rs-c-ag"]
    assert " * " in rows["rs-c-ag-sliced-state"]
