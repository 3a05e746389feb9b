"""The codegen knobs the cost model prices (workbench.options.PRICED): a fused collective's
push/pull mode (its reduce-scatter by peer stores into staging buffers, then a local pass) and
its blocks per SM (through a calibrated block curve); unroll, vector width and cache hints
have no modelled effect, which the options' metadata says."""

import dataclasses

from conftest import ROOT

from cost_model import collectives as coll
from cost_model.hardware import load_hardware
from cost_model.ops import program_cost
from simulator import simulate
from workbench.interpreter import bind_sizes
from workbench.loader import load
from workbench.options import PRICED, CodegenOptions

PULL, PUSH = CodegenOptions(), CodegenOptions(collective_mode="push")


def _adam(schedule, P=4, N=2**24):
    loaded = load(str(ROOT / "studies/adam.py"))
    program = loaded.program if schedule is None else loaded.schedules[schedule].apply()
    return program, bind_sizes(program, {"N": N, "P": P})


def _time(program, bound, cluster, options):
    return program_cost(program, cluster, bound, options=options).time_s


def test_push_reduce_scatters_by_peer_stores_and_a_local_pass():
    cluster = load_hardware("h200x4")
    program, bound = _adam("fuse-rs-c-ag")
    pull, push = (_time(program, bound, cluster, o) for o in (PULL, PUSH))
    # the reduce-scatter's (P-1)/P of the gradient: at store instead of load bandwidth
    rs = 4 * 2**24 * 3 / 4
    link = rs / cluster.peer_store_bandwidth_Bps - rs / cluster.peer_load_bandwidth_Bps
    assert push != pull and abs((push - pull) - link) < 0.05 * abs(link) + 1e-6
    # the simulator prices it the same way
    sims = [simulate(program, cluster, bound, record=False, options=o).time_s
            for o in (PULL, PUSH)]
    assert sims[0] == simulate(program, cluster, bound, record=False).time_s
    assert (sims[1] < sims[0]) == (push < pull)
    # nothing fused, or one rank (push is the pull kernel there): no difference
    plain, plain_bound = _adam(None)
    assert _time(plain, plain_bound, cluster, PUSH) == _time(plain, plain_bound, cluster, PULL)
    one, one_bound = _adam("fuse-rs-c-ag", P=1)
    assert _time(one, one_bound, cluster, PUSH) == _time(one, one_bound, cluster, PULL)


def test_blocks_per_sm_are_priced_through_a_calibrated_block_curve():
    program, bound = _adam("fuse-rs-c-ag")
    half = CodegenOptions(collective_blocks_per_sm=1)
    preset = load_hardware("h200x4")  # no curve: the grid has no modelled effect
    assert _time(program, bound, preset, half) == _time(program, bound, preset, PULL)
    full = 2 * preset.gpu.sm_count
    curve = dataclasses.replace(preset, fused_block_bandwidth=(
        (str(full // 4), 0.4), (str(full // 2), 0.7), (str(full), 1.0)))
    assert coll.fused_block_fraction(curve, full // 2) == 0.7
    assert _time(program, bound, curve, half) > _time(program, bound, curve, PULL)


def test_a_grid_cap_is_priced_through_a_calibrated_block_curve():
    """collective_grid (design note 94): a fused collective on at most that many blocks is
    priced at the curve's fraction for them; no curve (the presets), no effect."""
    program, bound = _adam("fuse-rs-c-ag")
    capped = CodegenOptions(collective_grid=33)
    preset = load_hardware("h200x4")
    assert _time(program, bound, preset, capped) == _time(program, bound, preset, PULL)
    full = 2 * preset.gpu.sm_count
    curve = dataclasses.replace(preset, fused_block_bandwidth=(
        ("4", 0.17), ("16", 0.63), ("33", 0.89), (str(full), 1.0)))
    assert _time(program, bound, curve, capped) > _time(program, bound, curve, PULL)
    # a cap above the full grid is the full grid
    big = CodegenOptions(collective_grid=10 * full)
    assert _time(program, bound, curve, big) == _time(program, bound, curve, PULL)
    assert "block curve" in PRICED["collective_grid"]


def test_the_knobs_without_a_modelled_effect_say_so():
    program, bound = _adam("fuse-rs-c-ag")
    cluster = load_hardware("h200x4")
    for knobs in ({"unroll": 2}, {"vec_bytes": 32}, {"cache": "stream"}, {"overlap_blocks": 8},
                  {"row_min_blocks": 1}, {"row_prefetch": True}):
        name = next(iter(knobs))
        assert PRICED[name].startswith("not priced"), name
        assert _time(program, bound, cluster, CodegenOptions(**knobs)) == \
            _time(program, bound, cluster, PULL)
    assert PRICED["collective_mode"].startswith("priced")
    assert "block curve" in PRICED["collective_blocks_per_sm"]
