"""The parameter-server program (Reduce to the root, update there, Broadcast): it means what
it says in the interpreter, the cost model and simulator price it, and it lowers to NCCL's
Reduce, one update kernel and NCCL's Broadcast; an OnRoot output is checked on its root only."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.lower import lower
from codegen.plan import KernelStep, NcclStep
from cost_model import load_hardware, program_cost
from runtime import checks
from simulator import simulate
from workbench import Local, P, Program, Reduce, Size, Sum, Tensor, float32, interpreter
from workbench.loader import load


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
    cost = program_cost(ps, cluster, bound)
    sim = simulate(ps, cluster, bound)
    assert sim.time_s >= cost.lower_bound_s > 0
    assert sim.time_s == pytest.approx(cost.time_s, rel=0.01)  # one stream, no overlap
    # Reduce + Broadcast through one root costs more than the AllReduce it stands for
    sgd = load("studies/sgd.py").program
    ar = program_cost(sgd, cluster, interpreter.bind_sizes(sgd, {"N": 2**26, "P": 4}))
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
    ref = interpreter.run(program, inputs, sizes)
    poison = {"total": np.full(4, np.nan, np.float32)}
    assert checks.compare(poison, program, program, ref, None, 0, 2, None).ok  # nothing held
    assert not checks.compare(poison, program, program, ref, None, 1, 2, None).ok
    assert checks.compare({"total": ref["total"]}, program, program, ref, None, 1, 2, None).ok
