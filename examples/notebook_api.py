"""The workbench from Python, as a notebook uses it (README, "From Python"): a study's
schedules simulated and lowered as DataFrames, a program written here with a schedule of its
own, sizes given as sympy Symbols, and the simulator's and interpreter's own doors.

    python examples/notebook_api.py
"""

import numpy as np
import sympy

import cost_model
import simulator
from workbench import (
    AllReduce,
    Local,
    P,
    Program,
    Replicated,
    Size,
    Sum,
    Tensor,
    Update,
    Variable,
    float32,
    schedule,
)
from workbench.cli import api

# A shipped study: every schedule on the 4x H200 preset, one row each.
table = api.simulate("studies/adam.py", "h200x4", {"N": 2**26})
print(table[["schedule", "time_ms", "speedup", "best"]].to_string(index=False))
best = table.loc[table["best"] == "*", "schedule"].item()

# What the GPU backend generates of each (kernels, or the reason it does not).
print(api.compile("studies/adam.py", gpus=4)[["schedule", "status", "kernels"]]
      .to_string(index=False))

# A program written here: SGD, with CoCoNet's fused schedule.
N = Size("N", multiple_of=P)
g = Tensor(float32, [N], Local, "g")
w = Tensor(float32, [N], Replicated, "w")
lr = Variable(float32, "lr")
g1 = AllReduce(Sum, g)
w1 = Update(w, w - lr * g1)
sgd = Program(inputs=[g, w, lr], outputs=[w1], name="sgd")


@schedule(sgd)
def fused(s):
    rs, ag = s.split(g1)
    (w1_s,) = s.reorder(w1, before=ag)
    s.fuse(rs, w1_s, w1)


# Sizes keyed by sympy Symbols (made here, without the DSL's assumptions) or by names.
sizes = {sympy.Symbol("N"): 2**26, sympy.Symbol("P"): 4}
print(api.simulate(sgd, "h200x4", sizes, schedules=[fused]).to_string(index=False))

# The simulator's own door: a timeline of the unscheduled program.
result = simulator.simulate(sgd, cost_model.load_hardware("h200x4"), sizes)
print(f"simulator.simulate: {result.time_s * 1e3:.3f} ms, {len(result.rows)} timeline rows")

# The fused schedule computes what the program does, in the reference interpreter.
small = {"N": 64, "P": 4}
want = api.interpret(sgd, small, seed=1)
got = api.interpret(sgd, small, seed=1, schedule="fused", schedules=[fused])
assert np.array_equal(want["w1"], got["w1"])
# A results table of `workbench sweep predict`, shipped: the best schedule per study and size.
sweep = api.results("records/h200x4/predicted.csv", "predicted_s")
fastest = sweep.loc[sweep.groupby(["study", "size"])["predicted_s"].idxmin()]
print(f"{len(fastest)} (study, size) pairs in the shipped sweep; their best schedules: "
      f"{sorted(set(fastest['schedule']))}")
print(f"best adam schedule on h200x4: {best}; the fused sgd matches the interpreter")
