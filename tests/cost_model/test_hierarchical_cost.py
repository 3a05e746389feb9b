"""The hierarchical split priced and simulated: each node-level collective as NCCL's plan on
its sub-group (intra: the node's GPUs over NVLink; inter: one GPU per node on its rail's
NIC), the simulator agreeing with the closed form, reduced and full alike."""

import pytest
from conftest import load_study
from plan_priced import priced

from cost_model import collectives as coll
from cost_model.hardware import preset
from simulator.engine import simulate
from workbench.interpreter import bind_sizes
from workbench.transforms import AsSlice, Fuse, HierarchicalSplit, Reorder


def _hier_adam(per_node=8):
    p = load_study("studies/adam.py").program
    h = HierarchicalSplit("g1", per_node).apply(p)
    r = Reorder(("m1", "v1", "w1"), "g1").apply(h)
    return Fuse(("m1_s", "v1_s", "w1_s", "w1")).apply(AsSlice(("m", "v")).apply(r))


@pytest.mark.parametrize("nodes", [2, 4])
def test_node_level_collectives_are_nccl_plans_on_their_sub_groups(nodes):
    c = preset("dgx-h100", nodes)
    prog = _hier_adam()
    N = 2**24
    bound = bind_sizes(prog, {"N": N, "P": 8 * nodes})
    by_statement = priced(prog, c, bound).by_statement()
    rs, ar = prog.stmts[0], prog.stmts[1]
    host = c.nccl.host_overhead_s
    want_rs = coll.collective_time("reducescatter", 4 * N, 8, c, 8)
    want_ar = coll.collective_time("allreduce", 4 * N / 8, nodes, c, nodes, one_per_node=True)
    assert by_statement[rs.name][0] == pytest.approx(want_rs, rel=1e-9)
    assert by_statement[ar.name][0] == pytest.approx(want_ar, rel=1e-9)
    # one GPU per node on its own 400 Gb/s NIC: NCCL's ring at 50 GB/s, not the node's 400
    plan = coll.choose_plan("allreduce", 4 * N / 8, nodes, c, nodes, one_per_node=True)
    assert plan.link == "nic" and float(plan.time_s) - host > 2 * (nodes - 1) / nodes * 4 * N \
        / 8 / 50e9


@pytest.mark.parametrize("reduced", [True, False])
def test_simulated_equals_the_closed_form(reduced):
    c = preset("dgx-h100", 2)
    prog = _hier_adam()
    bound = bind_sizes(prog, {"N": 2**22, "P": 16})
    model = float(priced(prog, c, bound).time_s)
    sim = simulate(prog, c, bound, reduced=reduced).time_s
    assert sim == pytest.approx(model, rel=0.02)
