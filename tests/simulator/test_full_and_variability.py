"""Every rank simulated in linear time (simulator.rings, the meetings of simulator.engine), the
reduced mode against it where the reduced mode is exact, and ranks that differ
(simulator.variability): a slow rank or a degraded link must change the answer."""

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_priced import priced

from cost_model.collectives import choose_plan
from cost_model.hardware import preset
from simulator import Simulation, Variability, VariabilityError, rings, simulate
from simulator.engine import MAX_STEP_EVENTS
from workbench.cli.main import main
from workbench.errors import WorkbenchError
from workbench.interpreter import bind_sizes
from workbench.loader import load

N = 2**24


def schedules(spec):
    loaded = load(spec)
    yield "unscheduled", loaded.program
    for name, sched in loaded.schedules.items():
        yield name, sched.apply()


def runnable(program, cluster, bound):
    from workbench.errors import NotOnThisCluster

    try:
        priced(program, cluster, bound)
    except NotOnThisCluster:
        return False
    return True


# ---------------------------------------------------------------- the ring solver


def ring_by_events(arrive, step_s, steps):
    """An independent reference: one SimPy process per rank, one event per rank and step
    (what the full mode did before): step 0 waits for the receiver to arrive, step k for
    the previous rank's step k - 1."""
    env = simpy.Environment()
    P = len(arrive)
    ready = [env.event() for _ in range(P)]
    done = [[env.event() for _ in range(steps)] for _ in range(P)]
    finish = [0.0] * P

    def rank(r):
        yield env.timeout(arrive[r])
        ready[r].succeed()
        yield ready[(r + 1) % P]
        for k in range(steps):
            if k:
                yield done[(r - 1) % P][k - 1]
            yield env.timeout(step_s[r])
            done[r][k].succeed()
        finish[r] = env.now

    for r in range(P):
        env.process(rank(r))
    env.run()
    return np.array(finish)


@settings(max_examples=60, deadline=None)
@given(P=st.integers(2, 9), extra=st.integers(-2, 3), data=st.data())
def test_ring_finish_is_the_step_by_step_ring(P, extra, data):
    steps = max(1, P - 1 + extra)
    arrive = np.array(data.draw(st.lists(st.floats(0, 5), min_size=P, max_size=P)))
    equal = data.draw(st.booleans())
    step_s = (np.full(P, 0.5) if equal else
              np.array(data.draw(st.lists(st.floats(0.1, 2), min_size=P, max_size=P))))
    want = ring_by_events(arrive, step_s, steps)
    got, _ = rings.ring_finish(arrive, step_s, steps)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    kept, starts = rings.ring_finish(arrive, step_s, steps, keep_steps=True)
    assert kept == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert starts.shape == (steps, P)
    assert (starts[-1] + step_s) == pytest.approx(want)


def test_one_slow_link_bounds_the_whole_ring():
    # NCCL's ring moves at its slowest link: the slow rank finishes at S of its steps, and
    # every other rank, waiting for data that passed through it, long after its nominal S
    P, S = 16, 30
    step_s = np.ones(P)
    step_s[5] = 3.0
    finish, _ = rings.ring_finish(np.zeros(P), step_s, S)
    assert finish.max() == finish[5] == pytest.approx(S * 3.0)
    assert finish.min() >= 2 * S


def test_a_tree_waits_for_its_last_rank_at_its_slowest_link():
    finish = rings.tree_finish(np.array([0.0, 2.0, 1.0]), np.array([1.0, 1.0, 1.5]), 4)
    assert finish.tolist() == [8.0, 8.0, 8.0]


# ---------------------------------------------------------------- reduced equals full


@pytest.mark.parametrize("gpus", [16, 64, 256])
@pytest.mark.parametrize("spec", ["studies/sgd.py", "studies/adam.py", "studies/pipeline.py",
                                  "studies/model_parallel.py"])
def test_reduced_equals_full_across_nodes(spec, gpus):
    loaded = load(spec)
    cluster = preset("dgx-h100", nodes=gpus // 8)
    batched = False
    for name, program in schedules(spec):
        P = gpus // len(program.groups())
        sizes = {k: max(P, v // 64 // P * P) for k, v in loaded.sizes.items()}
        bound = bind_sizes(program, sizes | {"P": P})
        if not runnable(program, cluster, bound):
            continue
        full = simulate(program, cluster, bound, reduced=False)
        reduced = simulate(program, cluster, bound, reduced=True)
        assert full.ranks_simulated == gpus and reduced.ranks_simulated < gpus
        assert full.time_s == pytest.approx(reduced.time_s, rel=1e-9), name
        if spec.endswith(("sgd.py", "adam.py")) and name.startswith("rs"):
            plan = choose_plan("reducescatter", 4 * sizes["N"], P, cluster, P)
            batched |= int(plan.steps) > MAX_STEP_EVENTS
    if gpus >= 256 and spec.endswith(("sgd.py", "adam.py")):
        assert batched, "the reduced mode's step batching must be on the path compared"


def test_full_time_is_the_ring_and_tree_closed_forms_and_grows_with_the_gpus():
    """Sequential programs: every rank simulated takes the cost model's sum, whose collectives
    are NCCL's ring (ReduceScatter, AllGather) and tree (AllReduce) formulas, so the answer
    grows with the GPU count (the ring in the ranks, the tree in log2 of the nodes)."""
    times = {}
    for gpus in (64, 256, 1024):
        cluster = preset("dgx-h100", nodes=gpus // 8)
        for name, program in schedules("studies/adam.py"):
            bound = bind_sizes(program, {"N": 2**28, "P": gpus})
            if not runnable(program, cluster, bound):
                continue
            full = simulate(program, cluster, bound, reduced=False, record=False)
            model = float(priced(program, cluster, bound).time_s)
            assert full.time_s == pytest.approx(model, rel=1e-9), (gpus, name)
            times.setdefault(name, []).append(full.time_s)
    assert set(times) == {"unscheduled", "ar-opt", "rs-c-ag", "rs-c-ag-sliced-state",
                          "fuse-rs-c-ag-ring"}
    for name, ts in times.items():
        assert ts == sorted(ts) and len(set(ts)) == 3, name


def count_events(program, cluster, bound, **kw):
    sim = Simulation(program, cluster, bound, reduced=False, record=False, **kw)
    events = sim.run().events
    assert not sim.events and not sim.meetings, "consumed events must not be kept"
    return events


def test_events_grow_linearly_with_the_ranks():
    # rs-c-ag: a ring ReduceScatter and AllGather of 2(P - 1) steps in all; one event per
    # rank and step would grow 16-fold from 64 to 256 GPUs
    program = load("studies/adam.py").schedules["rs-c-ag"].apply()
    counts = []
    for gpus in (64, 256):
        bound = bind_sizes(program, {"N": 2**24, "P": gpus})
        counts.append(count_events(program, preset("dgx-h100", nodes=gpus // 8), bound))
    assert counts[1] / counts[0] <= 4.1


def adam_64(name):
    """Adam's schedule `name` on 64 GPUs of dgx-h100, lowered: (program, cluster, bound,
    plan), as `workbench simulate` runs it."""
    from codegen.lower import lower

    loaded = load("studies/adam.py")
    program = loaded.schedules[name].apply() if name != "unscheduled" else loaded.program
    return (program, preset("dgx-h100", nodes=8), bind_sizes(program, {"N": N, "P": 64}),
            lower(program, 64, None))


@pytest.mark.parametrize("name", ["unscheduled", "ar-opt", "rs-c-ag-sliced-state"])
def test_a_solo_run_is_the_run_with_every_resource(name):
    # solo (one kernel at a time per GPU) takes SMs and HBM without events: the same
    # times, the same timeline, fewer events than through SimPy's resources
    program, cluster, bound, plan = adam_64(name)
    runs = []
    for solo in (True, False):
        sim = Simulation(program, cluster, bound, reduced=False, plan=plan)
        assert sim.solo
        sim.solo = solo
        runs.append(sim.run())
    solo, resources = runs
    assert solo.time_s == resources.time_s
    def key(row):
        return (row.t_start, row.t_end, row.gpu, row.resource, row.op)

    assert sorted(solo.rows, key=key) == sorted(resources.rows, key=key)
    assert solo.events < resources.events


def test_a_run_with_jitter_or_overlaps_is_not_solo():
    program, cluster, bound, plan = adam_64("unscheduled")
    assert not Simulation(program, cluster, bound, variability=Variability(jitter=0.02),
                          plan=plan).solo
    mp = load("studies/model_parallel.py")
    overlapped = mp.schedules["overlap-mm-fuse-ar-c"].apply()
    assert not Simulation(overlapped, cluster, bind_sizes(overlapped, {**mp.sizes, "P": 8}),
                          reduced=False).solo


def test_a_run_leaves_no_cyclic_garbage_and_the_collector_as_it_was():
    # the collector is paused while a simulation runs (simulator.resources): that holds
    # memory only if the run makes no cycles for it to find
    import gc

    program, cluster, bound, plan = adam_64("rs-c-ag-sliced-state")
    sim = Simulation(program, cluster, bound, reduced=False, plan=plan)
    assert gc.isenabled()
    gc.collect()  # what came before (a run this small does not collect first)
    sim.run()
    assert gc.isenabled()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        assert gc.garbage == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    gc.disable()
    try:
        Simulation(program, cluster, bound, reduced=False, plan=plan).run()
        assert not gc.isenabled()  # a caller's choice stands
    finally:
        gc.enable()


# ---------------------------------------------------------------- ranks that differ


def sgd_16(**variability):
    program = load("studies/sgd.py").schedules["rs-c-ag"].apply()
    cluster = preset("dgx-h100", nodes=2)
    bound = bind_sizes(program, {"N": N, "P": 16})
    v = Variability(**variability) if variability else None
    return program, cluster, bound, simulate(program, cluster, bound, reduced=False,
                                             variability=v)


def test_one_slow_rank_changes_the_answer():
    program, cluster, bound, nominal = sgd_16()
    assert nominal.time_s == pytest.approx(simulate(program, cluster, bound,
                                                    reduced=True).time_s, rel=1e-12)
    *_, slow = sgd_16(slow=((3, 2.0),))
    # the update kernel (between ReduceScatter and AllGather) of rank 3 streams twice as
    # long (its launch latency is the host's, not slowed), and the AllGather waits for it:
    # the step is later by that kernel's HBM time
    df = nominal.dataframe()
    update = df[(df.resource == "hbm") & df.op.str.endswith("= Update") & (df.gpu == 3)]
    kernel = float((update.t_end - update.t_start).sum())
    assert kernel > 0
    assert slow.time_s - nominal.time_s == pytest.approx(kernel, rel=0.01)


def test_a_degraded_link_slows_every_rank_of_its_ring():
    program, cluster, bound, nominal = sgd_16()
    *_, degraded = sgd_16(degraded=((9, 1.5),))
    ring_s = sum(int(p.steps) * float(p.step_s) for p in
                 (choose_plan(k, 4 * N, 16, cluster, 16) for k in ("reducescatter", "allgather")))
    assert degraded.time_s - nominal.time_s == pytest.approx(0.5 * ring_s, rel=0.01)


def test_draws_are_seeded():
    *_, a = sgd_16(jitter=0.05, seed=1)
    *_, b = sgd_16(jitter=0.05, seed=1)
    *_, c = sgd_16(jitter=0.05, seed=2)
    *_, nominal = sgd_16()
    assert a.time_s == b.time_s != c.time_s
    assert min(a.time_s, c.time_s) > nominal.time_s  # jitter only delays


def test_jitter_is_drawn_per_step_so_long_collectives_narrow():
    """Issue 23: a collective's S steps are jittered each on their own, so its factor is the
    mean of S draws of 1 + |N(0, s)|: mean 1 + s sqrt(2/pi) whatever S, spread s sqrt(1 -
    2/pi) / sqrt(S) (exact draws up to 32 steps, the closed form beyond)."""
    sigma = 0.1
    draw = Variability(seed=5, jitter=sigma).draw(1)
    mean = sigma * np.sqrt(2 / np.pi)
    spreads = {}
    for steps in (1, 14, 30, 254, 2046):
        xs = np.array([draw.steps_jitter(steps) for _ in range(4000)]) - 1
        assert xs.min() >= 0  # noise only delays
        assert xs.mean() == pytest.approx(mean, rel=0.05)
        spreads[steps] = xs.std()
        assert spreads[steps] == pytest.approx(sigma * np.sqrt(1 - 2 / np.pi) / np.sqrt(steps),
                                               rel=0.08)
    assert list(spreads.values()) == sorted(spreads.values(), reverse=True)
    # without jitter nothing is drawn: the other draws of a seed stay as they were
    quiet = Variability(seed=5).draw(1)
    state = quiet.rng.bit_generator.state
    assert quiet.steps_jitter(100) == 1.0 and quiet.rng.bit_generator.state == state


def test_a_longer_ring_has_a_narrower_tail():
    """The p99 of an AllReduce over many ranks, relative to its nominal time, falls with the
    ring's length: with one draw per statement the slowest rank set the whole ring, so
    tails stayed as wide as the per-kernel noise (issue 23)."""
    from simulator.variability import Draw

    def p99_over_nominal(P, samples=200):
        out = []
        for k in range(samples):
            rng = np.random.default_rng([7, k])
            draw = Draw(np.ones(P), np.ones(P), 0.05, rng)
            steps = 2 * (P - 1)
            step_s = np.array([draw.steps_jitter(steps) for _ in range(P)])
            finish, _ = rings.ring_finish(np.zeros(P), step_s, steps)
            out.append(finish.max() / steps)
        return np.percentile(out, 99) - np.percentile(out, 50)

    assert p99_over_nominal(64) < p99_over_nominal(8) < p99_over_nominal(2)


def test_stragglers_are_drawn_per_gpu():
    draw = Variability(seed=3, straggler_rate=0.25, straggler_slowdown=2.0).draw(4096)
    assert set(np.unique(draw.compute)) == {1.0, 2.0}
    assert 0.2 < (draw.compute == 2.0).mean() < 0.3


def test_ranks_that_differ_cannot_be_reduced():
    program, cluster, bound, _ = sgd_16()
    with pytest.raises(WorkbenchError, match=r"^reduced must be False when ranks differ"):
        simulate(program, cluster, bound, reduced=True, variability=Variability(jitter=0.1))
    # left to itself, the simulator goes full when ranks differ, even above 16 ranks
    result = simulate(program, cluster, bound, variability=Variability(slow=((0, 1.5),)))
    assert not result.reduced and result.ranks_simulated == 16


def run_cli(capsys, *args):
    code = main(["simulate", "studies/sgd.py", "--hardware", "dgx-h100", "--nodes", "2",
                 "--set", "N=2**24", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_samples_report_p50_and_p99(capsys):
    code, out, err = run_cli(capsys, "--jitter", "0.05", "--samples", "5")
    assert code == 0, err
    assert "simulated all 16 ranks" in out
    header = out.splitlines()[1].split()
    assert "p50_ms" in header and "p99_ms" in header


@pytest.mark.parametrize("args, message", [
    (["--slow", "3=-1"], "error: slow (--slow) factor of rank 3 must be a finite number >= 1 and "
     "<= 1e+06 (its computation "
     "takes that many times its nominal time), got -1.0; use 1 for a nominal rank, 2 for one "
     "twice as slow"),
    (["--slow", "16=2"], "error: slow (--slow) rank must be a GPU of the cluster (0..15), got "
     "16; name a rank below 16 or add --nodes"),
    (["--degrade", "2=0.5"], "error: degraded (--degrade) factor of rank 2 must be a finite "
     "number >= 1 and <= 1e+06 (its "
     "link takes that many times its nominal time), got 0.5; use 1 for a nominal rank, 2 for "
     "one twice as slow"),
    (["--degrade", "two=2"], "error: --degrade must be RANK=FACTOR (an integer GPU rank, a "
     "number >= 1), got 'two=2'; e.g. --degrade 3=1.5"),
    (["--jitter", "-0.1"], "error: jitter (--jitter) must be a standard deviation >= 0 and <= 100, "
     "got -0.1; e.g. 0.02 for 2 % noise per kernel"),
    (["--straggler-rate", "1.5"], "error: straggler_rate (--straggler-rate) must be a "
     "probability in [0, 1], got 1.5; e.g. 0.01 for 1 GPU in 100"),
    (["--straggler-rate", "0.1", "--straggler-slowdown", "0.5"], "error: straggler_slowdown "
     "(--straggler-slowdown) must be a finite number >= 1 and <= 1e+06 (a straggler "
     "computes that many times as slowly), "
     "got 0.5; e.g. 1.5"),
    (["--samples", "4"], "error: --samples must be 1 when every rank is the same, got 4; add "
     "--slow, --straggler-rate, --jitter or --degrade"),
])
def test_bad_variability_exits_2_naming_field_and_fix(capsys, args, message):
    code, _, err = run_cli(capsys, *args)
    assert code == 2
    assert err.strip() == message


def test_variability_error_is_a_workbench_error():
    with pytest.raises(VariabilityError):
        Variability(slow=((0, float("nan")),)).check(4)


@settings(max_examples=30, deadline=None)
@given(study=st.sampled_from(["sgd", "adam", "lamb", "model_parallel", "pipeline"]),
       pick=st.integers(0, 9), nodes=st.sampled_from([1, 2]),
       slow=st.lists(st.tuples(st.integers(0, 7), st.floats(1.0, 3.0)), max_size=3),
       degraded=st.lists(st.tuples(st.integers(0, 7), st.floats(1.0, 3.0)), max_size=2),
       jitter=st.sampled_from([0.0, 0.05]), seed=st.integers(0, 3))
def test_variability_only_delays(study, pick, nodes, slow, degraded, jitter, seed):
    """Ranks that differ never make a step faster than all ranks nominal, on any study and
    schedule (slow and degraded factors >= 1, jitter one-sided)."""
    from cost_model.hardware import load_hardware

    named = list(schedules(f"studies/{study}.py"))
    name, program = named[pick % len(named)]
    loaded = load(f"studies/{study}.py")
    cluster = load_hardware("h200x4", nodes)
    P = cluster.world_size // len(program.groups())
    bound = bind_sizes(program, {k: max(P, v // 256 // P * P) for k, v in loaded.sizes.items()}
                       | {"P": P})
    if not runnable(program, cluster, bound):
        return
    world = cluster.world_size
    v = Variability(seed=seed, slow=tuple((r % world, f) for r, f in slow),
                    degraded=tuple((r % world, f) for r, f in degraded), jitter=jitter)
    nominal = simulate(program, cluster, bound, reduced=False, record=False).time_s
    varied = simulate(program, cluster, bound, reduced=False, record=False,
                      variability=v).time_s
    assert varied >= nominal * (1 - 1e-9), (name, v)
