"""The pipelined hierarchy priced and simulated: the closed form (cost_model.ops.pipeline)
and the simulator's legs as processes (simulator.pipeline) agree, the node legs take turns on
NVLink while the leg across nodes holds the NIC, and the autotuner proposes the pipeline
with chunk counts chosen by size."""

import importlib.util
from pathlib import Path

import pytest
from plan_priced import priced

from cost_model.hardware import preset
from simulator import simulate
from workbench import autotune
from workbench.interpreter import bind_sizes
from workbench.loader import load

_spec = importlib.util.spec_from_file_location(
    "tph", Path(__file__).parents[1] / "workbench" / "test_pipeline_hierarchy.py")
_tph = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tph)
pipelined = _tph.pipelined


def _times(program, cluster, N, reduced=None):
    bound = bind_sizes(program, {"N": N, "P": cluster.world_size})
    cost = priced(program, cluster, bound)
    return (simulate(program, cluster, bound, reduced=reduced, record=False).time_s,
            float(cost.time_s), float(cost.lower_bound_s))


@pytest.mark.parametrize("chunks", [2, 4, 8])
def test_simulated_and_closed_form_agree_and_respect_the_bound(chunks):
    cluster = preset("dgx-h100", nodes=4)
    _, program = pipelined("studies/adam.py", 8, chunks)
    sim, model, bound = _times(program, cluster, 2**28)
    assert sim >= bound
    assert sim == pytest.approx(model, rel=0.15)


def test_pipelining_beats_the_legs_one_after_another_at_large_sizes():
    cluster = preset("dgx-h100", nodes=4)
    serial = load("studies/adam.py").program
    from workbench.scheduling import Scheduler
    s = Scheduler(serial)
    _, ar, ag = s.hierarchical_split("g1", 8)
    sliced = s.reorder("m1", "v1", "w1", before=ag)
    s.as_slice("m", "v")
    s.fuse(*sliced, "w1")
    one_after_another, _, _ = _times(s.program, cluster, 2**28)
    _, program = pipelined("studies/adam.py", 8, 8)
    overlapped, _, _ = _times(program, cluster, 2**28)
    assert overlapped < 0.75 * one_after_another


def test_the_node_legs_share_nvlink_so_the_pipeline_is_no_faster_than_their_sum():
    """Legs 1 and 3 move their bytes over the same NVLink, leg 2 over the NIC: pipelined, the
    schedule still takes at least both node legs' NVLink time (they cannot overlap), and the
    timeline books leg 2 on the NIC."""
    cluster = preset("dgx-h100", nodes=4)
    _, program = pipelined("studies/adam.py", 8, 8)
    bound = bind_sizes(program, {"N": 2**28, "P": 32})
    res = simulate(program, cluster, bound)
    assert res.busy_s["nic"] > 0 and res.time_s >= res.busy_s["link"] * 0.999
    assert {r.op.split(" ")[0] for r in res.rows if r.resource == "nic"} == {"g1_ar"}


def test_the_full_simulation_meets_the_reduced_one():
    """Within 5 %: the two modes share NVLink between the node legs differently (reduced:
    turns on the GPU's link, step batch by step batch; full: the node ReduceScatter's meeting
    as a max-min fair flow beside the fused kernel's turns)."""
    cluster = preset("dgx-h100", nodes=2)
    _, program = pipelined("studies/adam.py", 8, 4)
    full, _, _ = _times(program, cluster, 2**24, reduced=False)
    reduced, _, _ = _times(program, cluster, 2**24, reduced=True)
    assert full == pytest.approx(reduced, rel=0.05)


@pytest.mark.parametrize("N,expected", [(2**16, ()), (2**20, (2,)), (2**28, (2, 4, 8, 16))])
def test_the_autotuner_chooses_chunk_counts_by_size(N, expected):
    program = load("studies/adam.py").program
    placement = preset("dgx-h100", nodes=4).placement({"N": N, "P": 32})
    found = autotune.search(program, placement=placement).candidates
    counts = sorted({t.chunks for c in found for t in c.transforms
                     if t.name == "pipeline-hierarchy"})
    assert tuple(counts) == expected
