"""The codegen knobs the cost model prices (workbench.options.PRICED): a fused collective's
push/pull mode (its reduce-scatter by peer stores into staging buffers, then a local pass), its
blocks per SM (through a calibrated block curve) and its unroll (through a calibrated unroll
curve, design note 95); vector width and cache hints have no modelled effect, which the
options' metadata says."""

import dataclasses

import pytest
from conftest import ROOT
from plan_priced import kernel_steps, priced

from cost_model import collectives as coll
from cost_model.hardware import load_hardware
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
    return priced(program, cluster, bound, options).time_s


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
    for knobs in ({"vec_bytes": 32}, {"cache": "stream"},
                  {"row_min_blocks": 1}, {"row_prefetch": True}):
        name = next(iter(knobs))
        assert PRICED[name].startswith("not priced"), name
        assert _time(program, bound, cluster, CodegenOptions(**knobs)) == \
            _time(program, bound, cluster, PULL)
    assert PRICED["collective_mode"].startswith("priced")
    assert "block curve" in PRICED["collective_blocks_per_sm"]
    assert "block curve" in PRICED["overlap_blocks"]


def test_the_overlapped_consumer_grid_is_one_fact_of_the_plan():
    """Lowering decides that an overlapped consumer shares the SMs with its GEMM and on how
    many blocks (OverlapStep.consumer_grid, codegen.plan.overlap_grid); the runtime launches
    that grid, and the cost model prices the consumer on it through a calibrated block curve
    (design note 87): more blocks, faster peer accesses."""
    from codegen import plan as cp
    from codegen.lower import lower
    from cost_model.plan_cost import plan_cost

    loaded = load(str(ROOT / "studies/model_parallel.py"))
    program = loaded.schedules["overlap-mm-fuse-ar-c"].apply()
    bound = bind_sizes(program, {**loaded.sizes, "P": 4})
    preset = load_hardware("h200x4")
    full = 2 * preset.gpu.sm_count
    curve = dataclasses.replace(preset, fused_block_bandwidth=(
        (str(full // 8), 0.3), (str(full // 4), 0.5), (str(full), 1.0)))
    times = []
    for blocks in (0, full // 8, full // 4):
        plan = lower(program, 4, CodegenOptions(overlap_blocks=blocks))
        (step,) = plan.steps
        assert isinstance(step, cp.OverlapStep) and step.shares_sms
        assert step.consumer_grid(full) == (full // 4 if blocks == 0 else blocks)
        times.append(float(plan_cost(plan, curve, bound).time_s))
    assert times[0] == times[2] and times[1] > times[2]
    # and the IR-level bound reads the same grid from the options
    assert _time(program, bound, curve, CodegenOptions(overlap_blocks=full // 8)) > \
        _time(program, bound, curve, PULL)


def _plan_time(program, bound, cluster, options, P=4):
    from codegen.lower import lower
    from cost_model.plan_cost import plan_cost

    return float(plan_cost(lower(program, P, options), cluster, bound).time_s)


def test_unroll_is_priced_through_a_calibrated_unroll_curve():
    """Design note 95: a fused collective generated with U vectors per thread per iteration
    reaches the curve's factor of its unroll 1 peer bandwidth; no curve (the presets), no
    effect. The IR-level bound, the plan's price and the simulator agree on the direction."""
    program, bound = _adam("fuse-rs-c-ag")
    preset = load_hardware("h200x4")
    u1, u2, u4 = (CodegenOptions(unroll=u) for u in (1, 2, 4))
    assert _time(program, bound, preset, u2) == _time(program, bound, preset, u1)
    assert "unroll curve" in PRICED["unroll"]
    slower = dataclasses.replace(preset, fused_unroll_bandwidth=(("2", 0.8), ("4", 1.25)))
    assert coll.fused_unroll_factor(slower, 2) == 0.8
    assert coll.fused_unroll_factor(slower, 1) == 1.0
    assert coll.fused_unroll_factor(slower, 3) == (0.8 + 1.25) / 2
    t1, t2, t4 = (_time(program, bound, slower, o) for o in (u1, u2, u4))
    assert t2 > t1 > t4
    # the link-bound kernel's link time L scales by 1 / factor: t2 - t1 = L (1 / 0.8 - 1)
    # = L / 4 and t1 - t4 = L (1 - 1 / 1.25) = L / 5
    assert abs((t2 - t1) / (t1 - t4) - 1.25) < 1e-6
    # the plan's price reads the unroll the kernel was generated with (KernelSpec.unroll)
    p1, p2, p4 = (_plan_time(program, bound, slower, o) for o in (u1, u2, u4))
    assert p2 > p1 > p4
    assert abs(p2 - t2) < 1e-9 * t2 + 1e-12 and abs(p4 - t4) < 1e-9 * t4 + 1e-12
    sims = [simulate(program, slower, bound, record=False, options=o).time_s for o in (u1, u2)]
    assert sims[1] > sims[0]


def test_unroll_leaves_row_kernels_alone():
    """A row kernel is generated at unroll 1 whatever the options (codegen.lower_rows), so
    its price does not move with the unroll curve."""
    loaded = load(str(ROOT / "studies/allreduce_rmsnorm.py"))
    program = loaded.schedules["fuse-ar-c"].apply()
    bound = bind_sizes(program, {**loaded.sizes, "P": 4})
    curve = dataclasses.replace(load_hardware("h200x4"), fused_unroll_bandwidth=(("2", 0.5),))
    two = CodegenOptions(unroll=2)
    assert _time(program, bound, curve, two) == _time(program, bound, curve, PULL)
    assert _plan_time(program, bound, curve, two) == _plan_time(program, bound, curve, PULL)


def test_a_capped_kernel_beside_others_computes_on_its_own_sms():
    """A capped fused collective (design note 99: `fused_parts_cost` with its computation on
    `sms / sm_count` of the GPU, as simulator.training prices it) beside other kernels
    streams at the roofline's rate for that share of the SMs (HBM saturates at half of them,
    falls in proportion below); on every SM it is the plan's price of the kernel."""
    from codegen.lower import lower
    from cost_model.ops.fused import fused_parts_cost
    from cost_model.plan_cost import PlanContext, fused_parts_of, step_cost

    program, bound = _adam("fuse-rs-c-ag", P=1, N=2**24)
    cluster = load_hardware("h100x8")
    pc = PlanContext.of(lower(program, 1), cluster, bound)
    (kernel,) = kernel_steps(pc.plan, "collective")
    parts = fused_parts_of(pc, kernel)

    def capped(sms):
        return float(fused_parts_cost(pc.ctx, parts, None, sms / cluster.gpu.sm_count).time_s)

    full = float(step_cost(pc, kernel).time_s)
    assert capped(cluster.gpu.sm_count) == full
    t = {sms: capped(sms) for sms in (16, 48, 66)}
    launch = cluster.gpu.launch_latency_s
    assert (t[16] - launch) / (t[48] - launch) == pytest.approx(3.0)
    assert t[66] == full  # half the SMs saturate HBM
