"""Fused collectives moved by copy engines (transforms.CopyEngines, ir.Fused.engine "copy"):
the transform keeps values and rejects what it cannot do, lowering makes a kernel that touches
no peer memory plus copy-engine pulls and pushes, the executor enqueues them piece by piece
on three streams (CPU: the CUDA driver is faked), and the cost model prices the bytes at the
copy engines' bandwidth."""

import dataclasses

import numpy as np
import pytest
import sympy

from codegen.lower import lower
from codegen.plan import RANK, CopyEngineStep
from cost_model.hardware import preset
from cost_model.ops import fused_link_s
from cost_model.plan_cost import PlanContext, copy_engine_parts, plan_cost, step_cost
from simulator import simulate
from workbench import interpreter
from workbench.errors import IllegalTransform, NotOnThisCluster
from workbench.interpreter import bind_sizes
from workbench.loader import load
from workbench.runtime.launches import KernelLaunch
from workbench.transforms import CopyEngines, transform_from_json


def _schedule(spec, name):
    """A study's schedule; `fuse-rs-c-ag-ce`: its fused schedule moved by copy engines."""
    if name == "fuse-rs-c-ag-ce":
        return CopyEngines("g1_rs", 8).apply(load(spec).schedules["fuse-rs-c-ag"].apply())
    return load(spec).schedules[name].apply()


def _fused(program):
    return next(s for s in program.stmts if type(s.op).__name__ == "Fused")


@pytest.mark.parametrize("spec", ["studies/adam.py", "studies/adam.py:mixed", "studies/sgd.py"])
def test_copy_engines_keep_the_values(spec):
    pf = load(spec)
    fused = pf.schedules["fuse-rs-c-ag"].apply()
    program = _schedule(spec, "fuse-rs-c-ag-ce")
    assert _fused(program).op.engine == "copy" and _fused(program).op.chunks == 8
    for seed in (0, 1):
        interpreter.assert_equivalent(pf.program, program, {"N": 64, "P": 2}, seed)
    # the same values as the fused kernel on the SMs, bit for bit
    sizes = {"N": 48, "P": 4}
    inputs = interpreter.random_inputs(pf.program, sizes, seed=3)
    a, b = interpreter.run(fused, inputs, sizes), interpreter.run(program, inputs, sizes)
    for name, value in a.items():
        np.testing.assert_array_equal(b[name], value)


def test_copy_engines_reject_what_they_cannot_do():
    lamb = _schedule("studies/lamb.py", "fuse-rs-c-ag")
    with pytest.raises(IllegalTransform, match=r"copy_engines\(g1_rs, chunks=8\): a fused "
                       r"collective moved by copy engines must be one kernel, got the "
                       r"reduction w_norm inside.*keep this region on the SMs"):
        CopyEngines("g1_rs").apply(lamb)
    adam = _schedule("studies/adam.py", "rs-c-ag")
    with pytest.raises(IllegalTransform, match=r"the statement must be a fused collective "
                       r"\(FusedAllreduce, FusedReducescatter, FusedAllgather\), got "
                       r"ReduceScatter.*fuse it first"):
        CopyEngines("g1_rs").apply(adam)
    fused = _schedule("studies/adam.py", "fuse-rs-c-ag")
    with pytest.raises(IllegalTransform, match="chunks must be an integer >= 1 and <= 1024, got 0"):
        CopyEngines("g1_rs", chunks=0).apply(fused)


def test_copy_engines_round_trip_through_json():
    t = CopyEngines("g1_rs", chunks=16)
    assert transform_from_json(t.to_json()) == t


def test_lowering_moves_every_byte_by_copies_and_the_kernel_touches_no_peer():
    program = _schedule("studies/adam.py", "fuse-rs-c-ag-ce")
    plan = lower(program, 4)
    (step,) = [s for s in plan.steps if isinstance(s, CopyEngineStep)]
    assert step.chunks == 8
    kinds = {p.kind for p in step.kernel.spec.params}
    assert "peer" not in kinds and {"win_first", "win_count"} <= kinds
    assert step.kernel.spec.window and not step.kernel.spec.pushes
    assert step.start.spec.name == step.end.spec.name  # one barrier kernel, twice
    pull, push = step.copies
    N = sympy.Symbol("N", integer=True, positive=True)
    n = sympy.sympify(step.kernel.extent)
    assert pull.pull and (pull.src, pull.dst) == ("g", "stage_g")
    assert not push.pull and push.src == push.dst == "w"
    assert sympy.simplify(pull.src_offset - RANK * n) == 0
    assert sympy.simplify(n.subs({s: N for s in n.free_symbols}) - N / 4) == 0
    buffers = {b.name: b for b in plan.buffers}
    assert buffers["g"].peer and buffers["w"].peer and not buffers["stage_g"].peer


class _Drv:
    """Records what the executor enqueues: copies (stream, dst, src, bytes), events."""

    def __init__(self):
        self.calls = []
        drv = self

        class Stream:
            def __init__(self):
                self.id = len([c for c in drv.calls if c[0] == "stream"])
                drv.calls.append(("stream", self.id))

            def wait_for_event(self, ev):
                drv.calls.append(("wait", self.id, ev.id))

        class Event:
            def __init__(self, flags=None):
                self.id = id(self)

            def record(self, stream=None):
                drv.calls.append(("record", None if stream is None else stream.id, self.id))

        self.Stream, self.Event = Stream, Event
        self.event_flags = type("F", (), {"DISABLE_TIMING": 2})

    def memcpy_dtod_async(self, dst, src, nbytes, stream):
        self.calls.append(("copy", stream.id, dst, src, nbytes))


class _Run:
    """The PlanRun parts _CopyEngines uses: rank 1 of 2, buffers at known addresses."""

    P, stage, local = 2, 0, 1

    def __init__(self, sizes):
        self.gpu = type("G", (), {"drv": _Drv(), "rank": 1, "sm_count": 132})()
        self.subs = {**{s: v for s, v in sizes.items()}, RANK: 1}
        self.launched = []

    def int_of(self, expr):
        return int(sympy.sympify(expr).subs({s: v for s, v in self.subs.items()
                                             if not isinstance(s, str)}))

    def pointer(self, name, rank):
        return {"g": 0x1000_0000, "w": 0x2000_0000, "stage_g": 0x3000_0000}[name] \
            + rank * 0x100_0000_0000

    def prepare(self, step):
        return KernelLaunch(step, None, 1, [])

    def launch(self, item, stream=None, chunk=None, window=None):
        self.launched.append((item.step.spec.kind, None if stream is None else stream.id,
                              window))


def test_the_executor_pulls_computes_and_pushes_piece_by_piece():
    from workbench.runtime.chunked import CopyEnginesRun as _CopyEngines

    program = _schedule("studies/adam.py", "fuse-rs-c-ag-ce")
    plan = lower(program, 2)
    (step,) = [s for s in plan.steps if isinstance(s, CopyEngineStep)]
    N = 1024
    bound = bind_sizes(program, {"N": N, "P": 2})
    run = _Run(bound)
    ce = _CopyEngines(run, step)
    ce.run()
    n, piece, size = N // 2, N // 2 // 8, 4
    copies = [c for c in run.gpu.drv.calls if c[0] == "copy"]
    pulls = [c for c in copies if c[1] == 0]
    pushes = [c for c in copies if c[1] == 2]
    assert len(pulls) == len(pushes) == 8
    # rank 1 pulls its slice of rank 0's g into slot 0 of its staging buffer, piece by piece
    g0, stage1 = run.pointer("g", 0), run.pointer("stage_g", 1)
    assert pulls[3][2:] == (stage1 + 3 * piece * size, g0 + (n + 3 * piece) * size,
                            piece * size)
    # and pushes its slice of w into rank 0's w
    w0, w1 = run.pointer("w", 0), run.pointer("w", 1)
    assert pushes[5][2:] == (w0 + (n + 5 * piece) * size, w1 + (n + 5 * piece) * size,
                             piece * size)
    kinds = [k for k, _, _ in run.launched]
    assert kinds == ["barrier"] + ["piece"] * 8 + ["barrier"]
    assert [w for k, _, w in run.launched if k == "piece"] == [(i * piece, piece)
                                                               for i in range(8)]
    # each piece's kernel waits for that piece's pulls, each push for that piece's kernel
    calls = run.gpu.drv.calls
    first_kernel_wait = next(i for i, c in enumerate(calls) if c[0] == "wait" and c[1] == 1
                             and i > calls.index(pulls[0]))
    assert calls[first_kernel_wait - 1][0] == "record" and calls[first_kernel_wait - 1][1] == 0


def test_pieces_must_divide_the_slice():
    from codegen.plan import size_faults

    program = _schedule("studies/adam.py", "fuse-rs-c-ag-ce")
    plan = lower(program, 2)
    (fault,) = size_faults(plan, bind_sizes(program, {"N": 20, "P": 2}))
    assert "a rank's slice of 10 elements must be a multiple of chunks = 8" in fault
    assert size_faults(plan, bind_sizes(program, {"N": 32, "P": 2})) == []


def test_the_model_prices_the_bytes_at_the_copy_engines_bandwidth():
    cluster = preset("h200x4")
    program = _schedule("studies/adam.py", "fuse-rs-c-ag-ce")
    N, P = 2**28, 4
    bound = bind_sizes(program, {"N": N, "P": P})
    plan = lower(program, P)
    pc = PlanContext.of(plan, cluster, bound)
    (step,) = [s for s in plan.steps if isinstance(s, CopyEngineStep)]
    link = fused_link_s(pc.ctx, copy_engine_parts(pc, step))
    assert link == pytest.approx((P - 1) / P * 2 * N * 4 / cluster.copy_engine_bandwidth_Bps)
    slower = dataclasses.replace(cluster, copy_engine_bandwidth_Bps=cluster.
                                 copy_engine_bandwidth_Bps / 2)
    priced = float(step_cost(pc, step).time_s)
    assert step_cost(PlanContext.of(plan, slower, bound), step).time_s > 1.8 * priced
    # the simulator's pipeline of pieces agrees with the closed form within 5 %
    sim = simulate(program, cluster, bound).time_s
    assert sim == pytest.approx(priced, rel=0.05)


def test_copy_engines_cannot_cross_nodes():
    cluster = preset("h200x4").with_nodes(2)
    program = _schedule("studies/adam.py", "fuse-rs-c-ag-ce")
    bound = bind_sizes(program, {"N": 2**20, "P": 8})
    with pytest.raises(NotOnThisCluster, match=r"copy engines move data between GPUs of one "
                       r"node, got a group of 8 GPUs on nodes of 4; keep a fused collective "
                       r"across nodes on the SMs"):
        plan_cost(lower(program, 8), cluster, bound)


def test_simulate_leaves_out_what_the_cluster_cannot_run_and_says_why(capsys):
    from workbench.cli.main import main

    code = main(["simulate", "benchmarks/gpu/copy_engine_chunks.py", "--nodes", "2",
                 "--set", "N=2**20"])
    out = capsys.readouterr()
    assert code == 0, out.err
    # the verifier refuses it given the cluster (design note 37), naming the copy engines
    assert "schedule fuse-rs-c-ag-ce4 left out on h200x4*2: a fused allreduce kernel (copy " \
        "engines) must keep its group inside one NVLink domain of 4 GPUs" in out.err
    assert "fuse-rs-c-ag " in out.out  # the SM version is still predicted
