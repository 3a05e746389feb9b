"""Issue 15's user programs written from the README (studies/adagrad.py, SGD with
momentum and weight decay in studies/sgd_momentum.py): they mean torch's update, every
schedule computes what the program does, `workbench check` and `workbench simulate` take them,
and the fused schedule is one FusedAllReduce kernel keeping the state sliced."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.lower import lower
from codegen.plan import KernelStep
from workbench import interpreter
from workbench.cli.main import main as cli_main
from workbench.interpreter import assert_equivalent
from workbench.loader import load

ADAGRAD = "studies/adagrad.py"
SGD_WD = "studies/sgd_momentum.py:sgd_momentum_wd"
SCHEDULES = [(spec, name) for spec in (ADAGRAD, SGD_WD) for name in load(spec).schedules]


def test_adagrad_is_torchs_update():
    f = load(ADAGRAD)
    sizes = {"N": 12, "P": 3}
    x = interpreter.random_inputs(f.program, sizes, seed=5)
    out = interpreter.run(f.program, x, sizes)
    g = x["g"].astype(np.float64).sum(axis=0)
    s1 = x["s"] + g * g  # torch.optim.Adagrad: state_sum.addcmul_(grad, grad)
    w1 = x["w"] - x["lr"] * g / (np.sqrt(s1) + x["eps"])  # param.addcdiv_(grad, std, -clr)
    np.testing.assert_allclose(out["s1"], s1, rtol=1e-5)
    np.testing.assert_allclose(out["w1"], w1, rtol=1e-5, atol=1e-6)
    assert (x["s"] >= 0).all()  # declared range: the sum of squares is never negative


def test_sgd_momentum_weight_decay_is_torchs_update():
    f = load(SGD_WD)
    sizes = {"N": 8, "P": 2}
    x = interpreter.random_inputs(f.program, sizes, seed=2)
    out = interpreter.run(f.program, x, sizes)
    d = x["g"].astype(np.float64).sum(axis=0) + x["wd"] * x["w"]  # grad.add(param, alpha=wd)
    b1 = x["mu"] * x["b"] + d
    np.testing.assert_allclose(out[f.program.outputs[1].name], b1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[f.program.outputs[0].name], x["w"] - x["lr"] * b1,
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("spec,name", SCHEDULES)
@settings(max_examples=10, deadline=None)
@given(P_=st.integers(1, 8), k=st.integers(1, 4), seed=st.integers(0, 999))
def test_every_schedule_is_equivalent(spec, name, P_, k, seed):
    f = load(spec)
    assert_equivalent(f.program, f.schedules[name].apply(), {"N": P_ * k, "P": P_}, seed)


@pytest.mark.parametrize("spec", [ADAGRAD, SGD_WD])
def test_the_fused_schedule_is_one_kernel_keeping_the_state_sliced(spec):
    f = load(spec)
    assert set(f.schedules) - {"ar-opt", "fuse-rs-c-ag-ring"} == {
        "rs-c-ag", "rs-c-ag-sliced-state", "fuse-rs-c-ag"}
    fused = f.schedules["fuse-rs-c-ag"].apply()
    plan = lower(fused, 4)
    assert [type(s) for s in plan.steps] == [KernelStep]
    state = fused.outputs[1]  # the state output: sliced, as may_stay_sliced allows
    assert "Sliced" in type(state.type.layout).__name__


@pytest.mark.parametrize("spec", [ADAGRAD, SGD_WD])
def test_workbench_check_and_simulate_take_them(spec, capsys):
    assert cli_main(["check", spec]) == 0
    # sgd_momentum_wd adds CoCoNet's ar-opt and ring form, adagrad does not
    n = len(load(spec).schedules)
    assert f"{n} schedules ok" in capsys.readouterr().out
    assert cli_main(["check", spec, "--hardware", "h100x8", "--set", "P=1",
                     "--set", "N=2**24"]) == 0
    assert "P=1 ok on h100x8" in capsys.readouterr().out
    assert cli_main(["simulate", spec, "--hardware", "h200x4", "--set", "N=2**26"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert set(rows) - {"ar-opt", "fuse-rs-c-ag-ring"} == {
        "unscheduled", "rs-c-ag", "rs-c-ag-sliced-state", "fuse-rs-c-ag"}
    # the fused step: one kernel, the state left sliced; predicted fastest on h200x4
    assert rows["fuse-rs-c-ag"].split()[-2] == "*"
    assert rows["fuse-rs-c-ag"].split()[-1].endswith("_s")
