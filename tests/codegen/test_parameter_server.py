"""The parameter-server program (Reduce to the root, update there, Broadcast): it means what
it says in the interpreter, the cost model and simulator price it, and it lowers to NCCL's
Reduce, one update kernel and NCCL's Broadcast; an OnRoot output is checked on its root only."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_priced import priced

from codegen.lower import lower
from codegen.plan import KernelStep, NcclStep
from cost_model import load_hardware
from simulator import simulate
from workbench import (
    Broadcast,
    Compute,
    Local,
    P,
    Program,
    Reduce,
    Size,
    Sum,
    Tensor,
    float16,
    float32,
    interpreter,
    ir,
)
from workbench.errors import IllegalTransform
from workbench.loader import load
from workbench.runtime import checks
from workbench.transforms import Fuse


@pytest.fixture(scope="module")
def ps():
    return load("studies/parameter_server.py").program


@pytest.mark.parametrize("Pn", [1, 2, 4])
def test_the_interpreter_reduces_updates_on_the_root_and_broadcasts(ps, Pn):
    sizes = {"N": 8 * Pn, "P": Pn}
    inputs = interpreter.random_inputs(ps, sizes, seed=Pn)
    out = interpreter.run(ps, inputs, sizes)
    want = inputs["w"] - inputs["lr"] * inputs["g"].astype(np.float64).sum(axis=0)
    np.testing.assert_allclose(out["w2"], want, rtol=1e-5, atol=1e-6)


def test_it_is_priced_and_simulated(ps):
    cluster = load_hardware("h200x4")
    bound = interpreter.bind_sizes(ps, {"N": 2**26, "P": 4})
    cost = priced(ps, cluster, bound)
    sim = simulate(ps, cluster, bound)
    assert sim.time_s >= cost.lower_bound_s > 0
    assert sim.time_s == pytest.approx(cost.time_s, rel=0.01)  # one stream, no overlap
    # Reduce + Broadcast through one root costs more than the AllReduce it stands for
    sgd = load("studies/sgd.py").program
    ar = priced(sgd, cluster, interpreter.bind_sizes(sgd, {"N": 2**26, "P": 4}))
    assert cost.time_s > ar.time_s


def test_it_lowers_to_nccl_reduce_a_kernel_and_nccl_broadcast(ps):
    plan = lower(ps, 4)
    kinds = [(type(s).__name__, getattr(s, "op", "")) for s in plan.steps]
    assert kinds == [("NcclStep", "reduce"), ("KernelStep", ""), ("NcclStep", "broadcast")]
    red, upd, bc = plan.steps
    assert isinstance(red, NcclStep) and isinstance(upd, KernelStep)
    assert isinstance(bc, NcclStep) and red.root == bc.root == 0
    # the update writes into w's buffer on the root; the Broadcast sends it from there
    assert bc.src.buffer == "w" and red.dst.buffer == "gs"


def test_an_on_root_output_is_compared_on_its_root_only():
    N = Size("N", multiple_of=P)
    g = Tensor(float32, [N], Local, "g")
    total = Reduce(Sum, g, root=1)
    program = Program(inputs=[g], outputs=[total], name="r")
    sizes = {"N": 4, "P": 2}
    inputs = interpreter.random_inputs(program, sizes)
    ref = checks.reference(program, inputs, sizes, 2)
    poison = {"total": np.full(4, np.nan, np.float32)}
    assert checks.compare(poison, program, program, ref, 0, 2, None).ok  # nothing held
    assert not checks.compare(poison, program, program, ref, 1, 2, None).ok
    total = ref.values["total"].astype(np.float32)
    assert checks.compare({"total": total}, program, program, ref, 1, 2, None).ok


# -- the fused forms: computation at the root of the Reduce and before the Broadcast

SCHEDULES = ["fuse-reduce-c", "fuse-c-broadcast", "fuse-reduce-c-broadcast"]


@pytest.fixture(scope="module")
def ps_file():
    return load("studies/parameter_server.py")


@settings(max_examples=20, deadline=None)
@given(name=st.sampled_from(SCHEDULES), Pn=st.integers(1, 4), n=st.integers(1, 6),
       half=st.booleans(), seed=st.integers(0, 2**16))
def test_fused_forms_keep_the_meaning(name, Pn, n, half, seed):
    from studies.parameter_server import build

    program, schedules = build(float16 if half else float32)
    sched = next(s for s in schedules if s.name == name)
    interpreter.assert_equivalent(program, sched.apply(), {"N": Pn * n, "P": Pn}, seed=seed)


@pytest.mark.parametrize("name,kind", zip(SCHEDULES, ["reduce", "broadcast",
                                                      "reducebroadcast"]))
def test_a_fused_form_is_one_kernel_where_only_the_root_computes(ps_file, name, kind):
    program = ps_file.schedules[name].apply()
    fused = next(s for s in program.stmts if isinstance(s.op, ir.Fused))
    assert fused.op.kind == kind
    plan = lower(program, 4)
    (spec,) = plan.kernels()
    assert spec.kind == "collective" and spec.extent == "(rank == 0 ? N : 0LL)"
    peers = {p.ref for p in spec.params if p.kind == "peer"}
    assert peers == {"reduce": {"g"}, "broadcast": {"w2"}, "reducebroadcast": {"g", "w2"}}[kind]
    nccl = [s.op for s in plan.steps if isinstance(s, NcclStep)]
    assert nccl == {"reduce": ["broadcast"], "broadcast": ["reduce"], "reducebroadcast": []}[kind]


@pytest.mark.parametrize("name", SCHEDULES)
def test_fused_forms_are_priced_and_simulated_alike(ps_file, name):
    cluster = load_hardware("h200x4")
    program = ps_file.schedules[name].apply()
    bound = interpreter.bind_sizes(program, {"N": 2**26, "P": 4})
    cost = priced(program, cluster, bound)
    sim = simulate(program, cluster, bound)
    assert sim.time_s >= cost.lower_bound_s > 0
    assert sim.time_s == pytest.approx(cost.time_s, rel=0.02)
    # the root's links carry (P - 1) x the tensor: slower than NCCL's rings at 4 GPUs
    assert cost.time_s > priced(ps_file.program, cluster, bound).time_s


def test_a_fused_reduce_and_broadcast_must_share_a_root():
    N = Size("N", multiple_of=P)
    g = Tensor(float32, [N], Local, "g")
    gs = Reduce(Sum, g, root=0)
    w1 = Compute(gs * 2.0, name="w1")
    w2 = Broadcast(w1, root=1)
    program = Program(inputs=[g], outputs=[w2], name="roots")
    with pytest.raises(IllegalTransform, match=r"fuse\(gs, w1, w2\): a fused Reduce and "
                       r"Broadcast must share one root, got roots \[0, 1\]"):
        Fuse(("gs", "w1", "w2")).apply(program)


def test_a_value_computed_on_the_root_only_must_not_be_read_elsewhere():
    N = Size("N", multiple_of=P)
    x = Tensor(float32, [N], Local, "x")
    y0 = Compute(x * 2.0, name="y0")
    y = Broadcast(y0, root=0, name="y")
    z = Compute(y0 + 1.0, name="z")  # every rank's own y0
    program = Program(inputs=[x], outputs=[y, z], name="rooted")
    with pytest.raises(IllegalTransform, match=r"fuse\(y0, y\): y0 would be computed on the "
                       r"root only, but its Local value is read outside the fused kernel, got "
                       r"a use by z; leave it out of the fusion"):
        Fuse(("y0", "y")).apply(program)


def test_workbench_check_accepts_it_with_every_schedule():
    from workbench.cli.main import main

    assert main(["check", "studies/parameter_server.py"]) == 0
