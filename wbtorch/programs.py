"""Which input of an optimizer program is the gradient, the weights, the state and the
scalars, and which schedule runs it (design note 51); torch-free, tested in CI.

A data-parallel optimizer program (studies/sgd.py, adam.py, lamb.py, or any program of the same
form) takes: one Local tensor of shape [N] (the gradient, summed over the group by the program
itself), then a Replicated tensor of shape [N] (the weights), then any tensors of shape [N]
(optimizer state: Replicated, or Sliced(0) once a schedule keeps it sliced), then scalars
(shape (): hyperparameters such as lr, beta1, eps, and `step`, which the optimizer counts).
Every tensor output must update an input in place (an Update), so that the weights and state
the training loop sees are the buffers the kernel writes, except one: a mixed-precision
program's low-precision copy of the updated weights (an output [N] of the gradient's dtype,
`w16` of studies/adam.py's `mixed`), which the model's parameters then are (design note 83).
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench import ir
from workbench.errors import WorkbenchError
from workbench.types import LocalLayout, Sliced

STEP = "step"  # the scalar the optimizer counts itself (1 at the first step)
DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


class ProgramRoleError(WorkbenchError):
    """A program or schedule that the data-parallel optimizer cannot run."""


@dataclass(frozen=True, slots=True)
class Roles:
    """The roles of a (scheduled) optimizer program's inputs."""

    grad: str
    grad_dtype: str
    weights: str
    state: tuple[str, ...]
    sliced_state: tuple[str, ...]  # the state this schedule keeps as a slice per rank
    scalars: tuple[str, ...]
    weights_sliced: bool = False  # fp32 master weights kept sliced (mixed precision)
    low: str | None = None  # the low-precision weights output the model reads (mixed)

    @property
    def hyper(self) -> tuple[str, ...]:
        """The scalars the user gives (all but `step`)."""
        return tuple(s for s in self.scalars if s != STEP)


def roles(program: ir.Program) -> Roles:
    """The Roles of `program`'s inputs, or a ProgramRoleError naming what does not fit."""
    ins = list(program.inputs)
    vectors = [v for v in ins if len(v.type.shape) == 1]
    scalars = [v for v in ins if len(v.type.shape) == 0]
    odd = [v for v in ins if len(v.type.shape) > 1]
    fix = ("write it as studies/adam.py does: g (Local [N]), w (Replicated [N]), state ([N]), "
           "then scalars")
    if odd:
        raise ProgramRoleError(f"optimizer program {program.name}'s tensor inputs must have one "
                               f"dimension [N], got {odd[0].name} of shape {odd[0].type.shape}; "
                               + fix)
    locals_ = [v for v in vectors if isinstance(v.type.layout, LocalLayout)]
    if len(locals_) != 1 or not vectors or vectors[0] is not locals_[0]:
        raise ProgramRoleError(f"optimizer program {program.name} must take the gradient as "
                               f"its first input and only Local tensor, got Local inputs "
                               f"{[v.name for v in locals_]}; " + fix)
    if len(vectors) < 2:
        raise ProgramRoleError(f"optimizer program {program.name} must take the weights "
                               f"(Replicated [N]) after the gradient, got no second tensor; "
                               + fix)
    sizes = {str(v.type.shape[0]) for v in vectors}
    if len(sizes) != 1:
        raise ProgramRoleError(f"optimizer program {program.name}'s tensor inputs must all have "
                               f"the same length N, got lengths {sorted(sizes)}; " + fix)
    grad, weights, state = vectors[0], vectors[1], vectors[2:]
    low = None
    if grad.type.dtype != weights.type.dtype:  # mixed precision: the model's copy
        lows = [o for o in program.outputs if o.type.dtype == grad.type.dtype
                and len(o.type.shape) == 1 and str(o.type.shape[0]) in sizes]
        if len(lows) != 1:
            raise ProgramRoleError(
                f"mixed-precision optimizer program {program.name} must output one [N] tensor "
                f"of its gradient's dtype {grad.type.dtype.name} (the weights the model reads), "
                f"got {[o.name for o in lows]}; add w16 = Compute(Cast({grad.type.dtype.name}, "
                "w1)) as studies/adam.py's mixed does")
        low = lows[0].name
    return Roles(grad.name, grad.type.dtype.name, weights.name,
                 tuple(v.name for v in state),
                 tuple(v.name for v in state if isinstance(v.type.layout, Sliced)),
                 tuple(v.name for v in scalars), isinstance(weights.type.layout, Sliced), low)


def check_in_place(program: ir.Program, plan_locs: dict, low: str | None = None) -> None:
    """Every output but `low` (Roles.low: the model's low-precision weights, a buffer of its
    own) must live in an input's buffer (updated in place), or the training loop would not
    see it; `plan_locs` is a lowered Plan's locs."""
    inputs = {v.name for v in program.inputs}
    for out in program.outputs:
        if out.name == low:
            continue
        loc = plan_locs.get(out.name)
        if loc is None or loc.buffer not in inputs:
            raise ProgramRoleError(
                f"optimizer program {program.name}'s output {out.name} must update an input "
                f"in place (an Update of the weights or state), got it in buffer "
                f"{getattr(loc, 'buffer', None)!r}; the data-parallel optimizer runs programs "
                "whose outputs are the updated weights and state (and, mixed precision, one "
                "low-precision copy of the weights)")


def pick_schedule(loaded, name: str):
    """The program of schedule `name` of a loaded program file ('unscheduled': the program
    as written), or a ProgramRoleError listing the schedules it has."""
    if name == "unscheduled":
        return loaded.program
    if name not in loaded.schedules:
        have = ", ".join(["unscheduled", *loaded.schedules]) or "none"
        raise ProgramRoleError(f"schedule must be one of the program file's schedules, got "
                               f"{name!r}; {loaded.path} has: {have} (or pass schedule='auto')")
    return loaded.schedules[name].apply()


def check_grad_dtype(r: Roles, got: str) -> None:
    """Gradients (parameters) of dtype `got` (torch's name, e.g. float32) must be what the
    program takes."""
    want = DTYPES.get(r.grad_dtype, r.grad_dtype)
    if got != want:
        raise ProgramRoleError(f"gradients must be {want} for this program (its input "
                               f"{r.grad} is {r.grad_dtype}), got {got}; cast the model "
                               f"(model.to(torch.{want})) or pick a program for {got} gradients")


def check_hyper(r: Roles, given: dict) -> dict:
    """The scalars of the program from the user's hyperparameters, or an error naming the
    missing or unknown ones."""
    missing = [s for s in r.hyper if s not in given]
    extra = [k for k in given if k not in r.scalars]
    if missing or extra:
        raise ProgramRoleError(f"hyperparameters must be the program's scalars "
                               f"{list(r.hyper)}, got missing {missing} and unknown {extra}; "
                               "pass each by name (step is counted by the optimizer)")
    return {k: float(given[k]) for k in r.hyper}
