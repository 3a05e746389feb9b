"""Parallelism layouts (simulator.mesh): axes of a device mesh with their rank order, programs
run over a named axis on one shared network, and concurrent collectives that meet on a link
slowing each other by the max-min share (simulator.network), while those on disjoint links
do not."""

import pytest
from plan_priced import priced

from cost_model.hardware import preset
from simulator import simulate
from simulator.mesh import Mesh, MeshError, Phase, simulate_mesh
from workbench import AllReduce, Local, Program, Size, Sum, Tensor, float32
from workbench.cli.main import main
from workbench.interpreter import bind_sizes
from workbench.loader import load

N = 2**26


def allreduce(name):
    """A program of one AllReduce whose result is `name` (a collective alone on the link)."""
    n = Size("N")
    g = Tensor(float32, [n], Local, f"{name}_in")
    out = AllReduce(Sum, g, name=name)
    return Program(inputs=[g], outputs=[out], name=name)


def test_axes_place_tp_inside_a_node_and_dp_strided():
    mesh = Mesh.parse("tp=8,pp=4,dp=32")
    assert mesh.size == 1024
    assert mesh.groups("tp")[0] == list(range(8))
    assert mesh.groups("pp")[1] == [1, 9, 17, 25]
    assert mesh.groups("dp")[0] == [32 * i for i in range(32)]
    for axis, size in mesh.axes:
        groups = mesh.groups(axis)
        assert len(groups) == 1024 // size
        assert sorted(r for g in groups for r in g) == list(range(1024))
    cluster = preset("dgx-h100", nodes=128)
    dp = mesh.view(cluster, "dp")
    assert (dp.gpus_per_node, dp.nodes) == (1, 32)
    assert dp.nic_per_gpu_Bps == cluster.nic_per_gpu_Bps
    assert mesh.view(cluster, "tp").nodes == 1


def lone_link_s(result, op):
    """Seconds GPU 0 held its link for statement `op` (one row per collective above 64
    ranks, a row per step below)."""
    df = result.dataframe()
    rows = df[(df.resource == "link") & (df.gpu == 0) & (df.op == op)]
    return float((rows.t_end - rows.t_start).sum())


def test_concurrent_collectives_on_disjoint_links_do_not_slow_each_other():
    # tp=8,dp=2 on 2 nodes: the two tp groups' AllReduces run at once, each on its node's
    # NVLink; each takes what it takes alone on one node
    cluster = preset("dgx-h100", nodes=2)
    mesh = Mesh.parse("tp=8,dp=2")
    program = allreduce("a")
    bound = bind_sizes(program, {"N": N, "P": 8})
    both = simulate_mesh(cluster, mesh, [Phase(program, "tp", bound)])
    alone = simulate(program, preset("dgx-h100"), bound, reduced=False)
    assert both.time_s == alone.time_s
    assert both.ranks_simulated == 16
    # and the 8 dp groups of 2 ranks (one per node), each over its own GPU's NIC
    bound2 = bind_sizes(program, {"N": N, "P": 2})
    dp = simulate_mesh(cluster, mesh, [Phase(program, "dp", bound2)])
    view = mesh.view(cluster, "dp")
    assert dp.time_s == pytest.approx(float(priced(program, view, bound2).time_s),
                                      rel=1e-12)


def test_concurrent_collectives_on_a_shared_link_share_it_max_min():
    cluster = preset("dgx-h100", nodes=2)
    mesh = Mesh.parse("tp=8,dp=2")
    a, b = allreduce("a"), allreduce("b")
    tp_bound = bind_sizes(a, {"N": N, "P": 8})
    # two tp AllReduces at once on the same GPUs: each gets half of every NVLink
    alone = simulate_mesh(cluster, mesh, [Phase(a, "tp", tp_bound)])
    two = simulate_mesh(cluster, mesh, [Phase(a, "tp", tp_bound), Phase(b, "tp", tp_bound)],
                        concurrent=True)
    assert lone_link_s(two, "a = AllReduce") == pytest.approx(
        2 * lone_link_s(alone, "a = AllReduce"), rel=1e-9)
    # a tp AllReduce beside a dp one (over the NIC, 50 GB/s of the NVLink's 450): max-min
    # leaves the dp ring its 50 GB/s and gives the tp ring the rest of the NVLink
    dp_bound = bind_sizes(b, {"N": N, "P": 2})  # the dp ring (NIC) outlasts the tp one
    mixed = simulate_mesh(cluster, mesh, [Phase(a, "tp", tp_bound), Phase(b, "dp", dp_bound)],
                          concurrent=True)
    nvlink, nic = cluster.nvlink.bandwidth_Bps, cluster.nic_per_gpu_Bps
    # (within 0.5 %: the tp ring starts its transfer a few microseconds before the dp one,
    # whose fixed latency is longer, and runs alone until then)
    assert lone_link_s(mixed, "a = AllReduce") == pytest.approx(
        lone_link_s(alone, "a = AllReduce") * nvlink / (nvlink - nic), rel=5e-3)
    assert lone_link_s(mixed, "a = AllReduce") > lone_link_s(alone, "a = AllReduce") * 1.1
    dp_alone = simulate_mesh(cluster, mesh, [Phase(b, "dp", dp_bound)])
    assert lone_link_s(mixed, "b = AllReduce") == pytest.approx(
        lone_link_s(dp_alone, "b = AllReduce"), rel=1e-9)


def test_the_combined_step_model_parallel_over_tp_then_adam_over_dp():
    cluster = preset("dgx-h100", nodes=4)
    mesh = Mesh.parse("tp=8,dp=4")
    layer = load("studies/model_parallel.py")
    adam = load("studies/adam.py")
    tp = Phase(layer.program, "tp", bind_sizes(layer.program, {**layer.sizes, "P": 8}))
    dp = Phase(adam.program, "dp", bind_sizes(adam.program, {"N": 2**24, "P": 4}))
    step = simulate_mesh(cluster, mesh, [tp, dp])
    tp_alone = simulate_mesh(cluster, mesh, [tp]).time_s
    dp_alone = simulate_mesh(cluster, mesh, [dp]).time_s
    # the phases follow each other on every rank and every rank is alike: their sum, but
    # for the host's cost of the optimizer's one NCCL call, issued while the GPU still runs
    # the layer (as a host that issues ahead does)
    assert step.time_s == pytest.approx(tp_alone + dp_alone - cluster.nccl.host_overhead_s,
                                        rel=1e-9)
    assert step.ranks_simulated == 32
    # run at once (the optimizer beside the next layer), they overlap but meet on the links
    both = simulate_mesh(cluster, mesh, [tp, dp], concurrent=True).time_s
    assert max(tp_alone, dp_alone) < both < tp_alone + dp_alone


def test_pipeline_stages_along_a_mesh_axis():
    # tp=8,pp=2: stage k's rank r is GPU 8k + r, the layout the cost model assumes of stages;
    # a second copy (dp=2) on two other nodes shares no link with the first
    loaded = load("studies/pipeline.py")
    for name, program in [("unscheduled", loaded.program),
                          *((n, s.apply()) for n, s in loaded.schedules.items())]:
        bound = bind_sizes(program, {**loaded.sizes, "P": 8})
        alone = simulate(program, preset("dgx-h100", nodes=2), bound, reduced=False).time_s
        one = simulate_mesh(preset("dgx-h100", nodes=2), Mesh.parse("tp=8,pp=2"),
                            [Phase(program, "tp", bound, stages="pp")])
        two = simulate_mesh(preset("dgx-h100", nodes=4), Mesh.parse("tp=8,pp=2,dp=2"),
                            [Phase(program, "tp", bound, stages="pp")], record=False)
        assert one.time_s == alone and two.time_s == alone, name
    assert Mesh.parse("tp=2,pp=2,dp=2").instances("tp", "pp") == [
        [[0, 1], [2, 3]], [[4, 5], [6, 7]]]


def test_a_program_of_several_groups_needs_a_stages_axis():
    program = load("studies/pipeline.py").program
    cluster = preset("dgx-h100", nodes=2)
    with pytest.raises(MeshError, match=r"^--stages must name an axis of as many ranks as the "
                       r"program has process groups \(stages\), got 2 group\(s\) .* and no "
                       r"--stages in phase 0; pass --stages AXIS with an axis of 2$"):
        simulate_mesh(cluster, Mesh.parse("tp=8,pp=2"), [Phase(program, "tp", {})])
    with pytest.raises(MeshError, match=r"^--stages must be another axis than --axis"):
        simulate_mesh(cluster, Mesh.parse("tp=8,pp=2"), [Phase(program, "tp", {}, "tp")])


def run_cli(capsys, *args):
    code = main(["simulate", "studies/sgd.py", "--hardware", "dgx-h100", "--nodes", "16",
                 "--set", "N=2**24", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_simulate_a_pipeline_over_mesh_axes(capsys):
    code = main(["simulate", "studies/pipeline.py", "--hardware", "dgx-h100", "--nodes", "4",
                 "--mesh", "tp=8,pp=2,dp=2", "--axis", "tp", "--stages", "pp"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "simulated all 32 ranks" in out.out


def test_simulate_over_a_mesh_axis(capsys):
    code, out, err = run_cli(capsys, "--mesh", "tp=8,dp=16", "--axis", "dp")
    assert code == 0, err
    assert "simulated all 128 ranks" in out
    # sgd over dp, one GPU per node: each ring over its GPU's NIC, as the view prices it
    row = next(line for line in out.splitlines() if line.split()[:1] == ["unscheduled"])
    time_ms, model_ms = map(float, row.split()[1:3])
    assert time_ms == pytest.approx(model_ms, rel=1e-3)


@pytest.mark.parametrize("args, message", [
    (["--mesh", "tp=8,dp=8", "--axis", "dp"], "error: --mesh must multiply to the cluster's "
     "128 GPUs (dgx-h100*16), got tp=8 x dp=8 = 64; change an axis so the product is 128, or "
     "--nodes"),
    (["--mesh", "tp=8,dp=16", "--axis", "pp"], "error: --axis must be one of the mesh's axes "
     "(tp, dp), got 'pp'; name one of them or add it to --mesh"),
    (["--mesh", "tp=8,dp", "--axis", "dp"], "error: --mesh must be AXIS=SIZE pairs separated "
     "by commas (a name, a positive integer), got 'dp' in 'tp=8,dp'; e.g. --mesh tp=8,dp=128"),
    (["--mesh", "tp=8,tp=16", "--axis", "tp"], "error: --mesh must name each axis once, got "
     "'tp' twice in 'tp=8,tp=16'; merge them into one size"),
    (["--mesh", "tp=8,dp=16"], "error: --axis must name the mesh axis the program's groups run "
     "over, got none for --mesh tp=8,dp=16; e.g. --axis dp"),
    (["--axis", "dp"], "error: --axis needs --mesh, got --axis dp alone; add e.g. --mesh "
     "tp=8,dp=16"),
    (["--stages", "pp"], "error: --stages needs --mesh, got --stages pp alone; add e.g. "
     "--mesh tp=8,pp=16"),
    (["--mesh", "tp=8,dp=16", "--axis", "dp", "--set", "P=8"], "error: --set P must be the dp "
     "axis's size 16 with --mesh, got 8; drop --set P"),
])
def test_bad_mesh_exits_2_naming_field_and_fix(capsys, args, message):
    code, _, err = run_cli(capsys, *args)
    assert code == 2
    assert err.strip() == message


def test_tp_allreduce_dp_reducescatter_and_pipeline_send_at_once_meet_on_the_links():
    """tp=8,pp=2,dp=2 on 4 nodes: a tp AllReduce (NVLink), a dp ReduceScatter (NVLink and the
    GPU's NIC) and a pipeline Send to the next node (NVLink and NIC) at once. Each is slower
    than alone where they meet; alone each takes its own time."""
    from workbench import P, Pipeline, ReduceScatter, Replicated, Send, Stage

    n = Size("N", multiple_of=P)
    s0, s1 = Stage("s0"), Stage("s1")
    x = Tensor(float32, [n], Replicated, "x", group=s0)
    send = Pipeline([s0, s1], inputs=[x], outputs=[Send(x, s1, name="sent")], name="send")
    g = Tensor(float32, [n], Local, "rs_in")
    rs = Program(inputs=[g], outputs=[ReduceScatter(Sum, g, name="rs")], name="rs")
    ar = allreduce("ar")
    cluster = preset("dgx-h100", nodes=4)
    mesh = Mesh.parse("tp=8,pp=2,dp=2")
    phases = {"ar = AllReduce": Phase(ar, "tp", bind_sizes(ar, {"N": N, "P": 8})),
              "rs = ReduceScatter": Phase(rs, "dp", bind_sizes(rs, {"N": N, "P": 2})),
              "sent = Send": Phase(send, "tp", bind_sizes(send, {"N": N // 4, "P": 8}), "pp")}
    together = simulate_mesh(cluster, mesh, list(phases.values()), concurrent=True)
    for op, phase in phases.items():
        alone = simulate_mesh(cluster, mesh, [phase])
        assert lone_link_s(together, op) > 1.05 * lone_link_s(alone, op), op
    # each alone on the mesh is its time alone on its own links (nothing else to meet)
    assert simulate_mesh(cluster, mesh, [phases["rs = ReduceScatter"]]).time_s == \
        pytest.approx(float(priced(rs, mesh.view(cluster, "dp"),
                                         phases["rs = ReduceScatter"].bound).time_s), rel=1e-12)


@pytest.mark.parametrize("oversubscription", [1.0, 2.0])
def test_groups_on_one_rail_share_an_oversubscribed_leaf_uplink(oversubscription):
    """Leaves of 2 nodes, 4 nodes: the b groups of tp=8,a=2,b=2 ({0, 16}, {8, 24}, ...) each
    join a node of leaf 0 and one of leaf 1, and the two groups of a rail climb through the
    same uplink of each leaf. Non-blocking (2 NICs' worth of uplink per rail and leaf), both
    rings run at their NIC's speed; at 2:1 the uplink holds one NIC's worth, and max-min
    gives each half of it."""
    import dataclasses

    base = preset("dgx-h100", nodes=4)
    # without switch hops (crossing the spine would add their latency): bandwidth alone
    base = dataclasses.replace(base, fabric=dataclasses.replace(base.fabric,
                                                                switch_latency_s=0.0))
    cluster = dataclasses.replace(base, fabric=dataclasses.replace(
        base.fabric, nodes_per_leaf=2, oversubscription=oversubscription))
    mesh = Mesh.parse("tp=8,a=2,b=2")
    assert mesh.groups("b")[:2] == [[0, 16], [1, 17]]
    program = allreduce("x")
    bound = bind_sizes(program, {"N": N, "P": 2})
    result = simulate_mesh(cluster, mesh, [Phase(program, "b", bound)])
    nonblocking = simulate_mesh(base, mesh, [Phase(program, "b", bound)])
    ratio = lone_link_s(result, "x = AllReduce") / lone_link_s(nonblocking, "x = AllReduce")
    assert ratio == pytest.approx(oversubscription, rel=1e-9)
