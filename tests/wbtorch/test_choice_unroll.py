"""wbtorch's simulated choice prices the unroll (design note 95): on a profile whose
calibrated unroll curve says unroll 2 is slower the choice keeps 1, and where it says 2 is
faster it takes 2; without a curve (the presets) the unroll candidates share a time and the
first (unroll 1) wins. torch-free: the choice is the simulator's."""

import dataclasses

from conftest import ROOT

from cost_model.hardware import load_hardware
from wbtorch import choice as ch
from workbench.loader import load


def _choose(cluster, P=4, numel=2**22):
    loaded = load(str(ROOT / "studies/adam.py"))
    cands = [c for c in ch.candidates(loaded, P, False, modes=("pull",), unrolls=(1, 2),
                                      blocks=(2,)) if c.schedule == "fuse-rs-c-ag"]
    times = ch.predict(loaded, cands, numel, P, cluster)
    return ch.best(times), times


def test_a_curve_that_slows_unroll_2_keeps_unroll_1():
    cluster = dataclasses.replace(load_hardware("h200x4"), fused_unroll_bandwidth=(("2", 0.9),))
    pick, times = _choose(cluster)
    assert pick.unroll == 1
    by_unroll = {c.unroll: t for c, t in times.items()}
    assert by_unroll[2] > by_unroll[1]


def test_a_curve_that_speeds_unroll_2_takes_it():
    cluster = dataclasses.replace(load_hardware("h200x4"), fused_unroll_bandwidth=(("2", 1.1),))
    pick, times = _choose(cluster)
    assert pick.unroll == 2
    assert "unroll 2" in pick.label


def test_without_a_curve_unroll_candidates_share_a_time():
    pick, times = _choose(load_hardware("h200x4"))
    assert len(set(times.values())) == 1 and pick.unroll == 1
