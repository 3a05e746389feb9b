"""Pricing the fused AllReduce + row computation by algorithm (issue 25): bytes over NVLink
and HBM from what each algorithm's kernel moves, synchronizations from its barriers, and the
simulator running the same plan steps (never below the cost model's lower bound)."""

from dataclasses import replace

import pytest
from plan_priced import kernel_steps, priced

from codegen.lower import lower
from cost_model.hardware import preset
from cost_model.ops import work_s
from cost_model.ops.fused import fused_latency_s, fused_link_s, fused_parts_cost
from cost_model.plan_cost import PlanContext, fused_parts_of, plan_cost
from simulator import simulate
from workbench.interpreter import bind_sizes

NEW = ("fuse-ar-c", "fuse-ar-c-oneshot", "fuse-ar-c-lamport")


def _parts(f, name, T=64, H=4096, P=4, fixed_s=0.0):
    p = f.schedules[name].apply()
    cluster = replace(preset("h200x4"), fused_fixed_s=fixed_s)
    return _fused(p, cluster, {"T": T, "H": H, "P": P})


def _fused(program, cluster, sizes):
    """(the plan's cost context, its fused collective kernel step, its FusedParts)."""
    pc = PlanContext.of(lower(program, sizes["P"]), cluster, bind_sizes(program, sizes))
    kernel = kernel_steps(pc.plan, "collective")[0]
    return pc.ctx, kernel, fused_parts_of(pc, kernel)


def test_bytes_of_each_algorithm(study):
    f = study("studies/allreduce_rmsnorm.py")
    S = 64 * 4096 * 2  # f16 input per rank
    _, _, two = _parts(f, "fuse-ar-c")
    assert (two.rs_nbytes, two.ag_nbytes) == (S, S)  # NCCL's: reduce-scatter + all-gather
    _, _, one = _parts(f, "fuse-ar-c-oneshot")
    assert (one.rs_nbytes, one.ag_nbytes) == (4 * S, 0)  # (P - 1) S loaded per rank
    _, _, lam = _parts(f, "fuse-ar-c-lamport")
    assert (lam.rs_nbytes, lam.ag_nbytes) == (0, 4 * S)  # (P - 1) S stored per rank
    # fuse-rs-c-ag gathers two outputs: 1.5x the bytes of fuse-ar-c over NVLink
    _, _, rs = _parts(f, "fuse-rs-c-ag")
    assert rs.rs_nbytes + rs.ag_nbytes == 3 * S


def test_lamport_pays_no_barrier(study):
    """A calibrated fused kernel's fixed cost beyond launch (its barriers: 20 us here) is not
    paid by the Lamport kernel; one-shot keeps both barriers."""
    f = study("studies/allreduce_rmsnorm.py")
    ctx, _, lam = _parts(f, "fuse-ar-c-lamport", fixed_s=20e-6)
    ctx2, _, two = _parts(f, "fuse-ar-c", fixed_s=20e-6)
    assert float(fused_latency_s(ctx2, None, two)) - float(fused_latency_s(ctx, None, lam)) == \
        pytest.approx(20e-6)
    _, _, one = _parts(f, "fuse-ar-c-oneshot", fixed_s=20e-6)
    assert float(fused_latency_s(ctx2, None, one)) == float(fused_latency_s(ctx2, None, two))


@pytest.mark.parametrize("T", [4, 128, 8192])
def test_fuse_ar_c_is_priced_below_fuse_rs_c_ag_and_nccl(study, T):
    f = study("studies/allreduce_rmsnorm.py")
    cluster = preset("h200x4")
    sizes = {"T": T, "H": 8192, "P": 4}

    def cost(p):
        return float(priced(p, cluster, bind_sizes(p, sizes)).time_s)

    ar = cost(f.schedules["fuse-ar-c"].apply())
    assert ar < cost(f.schedules["fuse-rs-c-ag"].apply())
    assert ar < cost(f.program)


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("T", [4, 8192])
def test_the_simulator_runs_each_algorithm_above_the_lower_bound(study, name, T):
    f = study("studies/allreduce_rmsnorm.py")
    p = f.schedules[name].apply()
    cluster = preset("h200x4")
    bound = bind_sizes(p, {"T": T, "H": 8192, "P": 4})
    sim = simulate(p, cluster, bound)
    model = priced(p, cluster, bound)
    assert sim.time_s >= float(model.lower_bound_s) * (1 - 1e-9)
    assert sim.time_s == pytest.approx(float(model.time_s), rel=0.1)


def _on_h100x2(f, name, T, H):
    """(context, fused kernel step, parts) of a schedule on 2 GPUs of the h100x8 preset."""
    p = f.schedules[name].apply()
    return _fused(p, preset("h100x8"), {"T": T, "H": H, "P": 2})


def test_two_shot_passes_run_after_the_link_phase(study):
    """Design note 97: the two-shot's passes read the summed rows back after its barrier, so
    their HBM time adds to the link phase's (reduce-scatter and gather stores) instead of
    hiding under it; one-shot's passes reduce as they load, beside the link."""
    f = study("studies/allreduce_rmsnorm.py")
    T, H = 8192, 16384
    S = T * H * 2
    ctx, _, two = _on_h100x2(f, "fuse-ar-c", T, H)
    # phase one: my input served once, the summed rows landing; after: summed rows and the
    # residual read, h and out written (and g, the statistic: a row's worth)
    assert float(two.work.hbm_bytes) == 2 * S
    assert 4 * S <= float(two.after.hbm_bytes) < 4 * S * 1.001
    link, comp, after = (float(x) for x in (fused_link_s(ctx, two), work_s(ctx.cluster, two.work),
                                             work_s(ctx.cluster, two.after)))
    assert link > comp and after > 0.3 * link  # link-bound phase one, then a pass over HBM
    t = float(fused_parts_cost(ctx, two).time_s)
    assert t == pytest.approx(float(fused_latency_s(ctx, None, two)) + link + after, rel=1e-12)
    _, _, one = _on_h100x2(f, "fuse-ar-c-oneshot", T, H)
    assert one.after is None


def test_lamport_passes_wait_for_its_stores(study):
    """Lamport's passes spin-read the receive buffer after the block's stores, and re-poison
    it after the passes: P S read and P S written after the link phase; its stores' P S land
    in HBM beside it (design note 97)."""
    f = study("studies/allreduce_rmsnorm.py")
    T, H = 1024, 4096
    S = T * H * 2
    _, _, lam = _on_h100x2(f, "fuse-ar-c-lamport", T, H)
    assert (float(lam.work.hbm_bytes), float(lam.work.write_bytes)) == (3 * S, 2 * S)
    # spin-reads 2 S, re-poison 2 S, residual S, h and out 2 S (and g, the statistic)
    assert 7 * S <= float(lam.after.hbm_bytes) < 7 * S * 1.001


@pytest.mark.parametrize("H", [4096, 16384])
def test_one_shot_is_priced_below_two_shot_at_p2_and_large_t(study, H):
    """At P = 2 one-shot and two-shot move the same NVLink bytes; the two-shot's pass over the
    summed rows after its barrier makes it the slower (GPU run 35 on 2 H100: 0.83 against
    1.21 ms at T = 8192, H = 16384 f16), in the cost model, from the plan, and simulated."""
    f = study("studies/allreduce_rmsnorm.py")
    cluster = preset("h100x8")
    times = {}
    for name in ("fuse-ar-c", "fuse-ar-c-oneshot"):
        p = f.schedules[name].apply()
        bound = bind_sizes(p, {"T": 8192, "H": H, "P": 2})
        plan_s = float(plan_cost(lower(p, 2), cluster, bound).time_s)
        times[name] = (plan_s, simulate(p, cluster, bound).time_s)
    assert times["fuse-ar-c-oneshot"][0] < times["fuse-ar-c"][0] / 1.2
    assert times["fuse-ar-c-oneshot"][1] < times["fuse-ar-c"][1] / 1.2


def test_the_simulator_runs_the_passes_after_the_link_phase(study):
    """The simulated two-shot takes at least its link phase plus its passes (never the
    two beside each other), as the cost model prices it."""
    f = study("studies/allreduce_rmsnorm.py")
    ctx, _, two = _on_h100x2(f, "fuse-ar-c", 8192, 8192)
    sim = simulate(ctx.program, ctx.cluster, ctx.bound)
    floor = float(fused_link_s(ctx, two) + work_s(ctx.cluster, two.after))
    assert floor <= sim.time_s == pytest.approx(float(fused_parts_cost(ctx, two).time_s), rel=0.02)


def test_the_autotuners_cheapest_candidate_at_p2_and_large_t_is_one_shot(study):
    """Among the autotuner's candidates (it proposes the other algorithms of every two-shot
    region), the cost model prices one-shot cheapest at P = 2, T = 8192 on the H100 preset,
    the form GPU run 35 measured fastest there."""
    from workbench import autotune

    f = study("studies/allreduce_rmsnorm.py")
    cluster = preset("h100x8")
    found = autotune.search(f.program, max_depth=4, max_candidates=40)

    def cost(c):
        bound = bind_sizes(c.program, {"T": 8192, "H": 16384, "P": 2})
        return float(priced(c.program, cluster, bound).time_s)

    best = min(found.candidates, key=cost)
    assert best.name.endswith("allreduce-algorithm-one-shot")
