"""Schedules checked for meaning without a GPU (`workbench check --equivalence`): every named
schedule and every autotuner candidate runs against the unscheduled program in the reference
interpreter, at small sizes on P virtual ranks, on the same random inputs.

A mismatch is reported by statement: the first value, in the program's order, that both
programs compute under the same name (transforms keep names, or add a suffix such as `_s` for
a value on slices) and whose logical values differ beyond the dtype's tolerance; when no shared
value differs, the output that does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import numpy as np
import sympy

from workbench import ir
from workbench.errors import WorkbenchError
from workbench.interpreter.machine import _Machine
from workbench.interpreter.oracle import max_relative_error, output_tolerance, random_inputs
from workbench.interpreter.sizes import bind_sizes, concrete, from_ranks, to_ranks
from workbench.types import OnRoot


@dataclass(frozen=True)
class Mismatch:
    """Where a schedule changed the program's meaning."""

    schedule: str
    value: str
    statement: str  # `name = op` of the transformed program, with its file:line
    error: float
    tolerance: float

    def __str__(self) -> str:
        return (f"schedule {self.schedule}: value '{self.value}' must match the unscheduled "
                f"program within {self.tolerance:g}, got max relative error {self.error:.3g} "
                f"at {self.statement}")


def small_sizes(program: ir.Program, P: int, base: int = 2) -> dict[str, int]:
    """Sizes for a quick interpreter run on P ranks: each declared multiple (at this P) times
    `base`, and 4 * base for a size with no declared multiple."""
    facts = {sym: sympy.sympify(m) for sym, m in program.facts}
    sizes: dict[str, int] = {"P": P}
    for sym in program.symbols():
        if sym.name == "P":
            continue
        m = facts.get(sym)
        if m is None:
            sizes[sym.name] = 4 * base
            continue
        at_p = m.subs({s: P for s in m.free_symbols if s.name == "P"})
        at_p = at_p.subs({s: sizes.get(s.name, 4 * base) for s in at_p.free_symbols})
        sizes[sym.name] = int(at_p) * base
    return sizes


def _values(program: ir.Program, inputs: Mapping[str, np.ndarray], sizes: Mapping[str, int]
            ) -> tuple[dict[str, np.ndarray], dict[str, ir.Stmt]]:
    """Every value's logical array (where it means something) and its defining leaf."""
    bound = bind_sizes(program, sizes)
    m = _Machine(bound, {}, {})
    for v in program.inputs:
        m.types[v.name] = v.type
        m.env[v.name] = to_ranks(inputs[v.name], v.type, bound)
    values, where = {}, {}
    for leaf in program.leaves():
        m.run_stmt(leaf)
        out = leaf.out
        arrays = m.env[out.name]
        if isinstance(out.type.layout, OnRoot):
            values[out.name] = arrays[out.type.layout.root]
        else:
            try:
                values[out.name] = from_ranks(out.name, arrays, out.type)
            except Exception:  # replicas that disagree: the outputs' check names them
                continue
        where[out.name] = leaf
    return values, where


def _stmt_text(leaf: ir.Stmt) -> str:
    return f"{leaf.name} = {leaf.op}" + (f" ({leaf.loc})" if leaf.loc else "")


def compare_schedule(name: str, original: ir.Program, scheduled: ir.Program,
                     sizes: Mapping[str, int], seed: int = 0) -> Mismatch | None:
    """Run both programs on the same random inputs; the first differing statement, or None."""
    inputs = random_inputs(original, sizes, seed)
    a, _ = _values(original, inputs, sizes)
    b, where = _values(scheduled, inputs, sizes)
    for leaf in original.leaves():  # shared values first, in the program's order
        n = leaf.out.name
        if n in a and n in b and a[n].shape == b[n].shape:
            tol = output_tolerance(leaf.out.type)
            err = max_relative_error(b[n], a[n])
            if not err <= tol:
                return Mismatch(name, n, _stmt_text(where[n]), err, tol)
    for va, vb in zip(original.outputs, scheduled.outputs):
        if va.name not in a or vb.name not in b:
            continue  # an output that is an input, or whose replicas disagree: run() says so
        err = max_relative_error(b[vb.name], a[va.name])
        tol = output_tolerance(va.type)
        if not err <= tol:
            leaf = where.get(vb.name)
            return Mismatch(name, vb.name, _stmt_text(leaf) if leaf else "the output", err, tol)
    return None


RANKS_MAX = 1024
# The interpreter holds every value of the program on every virtual rank: past this many
# elements in all (about 2 GiB of float64) a run is refused before numpy runs out of memory
# (--ranks 1000000 and --set N=2**62 ended in numpy MemoryErrors).
ELEMENTS_MAX = 1 << 28


def _check_elements(program: ir.Program, bound, ranks: int, sizes: Mapping[str, int]) -> None:
    """Refuse a run whose values would hold more than ELEMENTS_MAX elements on all ranks."""
    total = 0
    for v in [*program.inputs, *(leaf.out for leaf in program.leaves())]:
        numel = 1
        for d in v.type.shape:
            numel *= concrete(d, bound)
        total += numel * ranks
        if total > ELEMENTS_MAX:
            shown = ", ".join(f"{k}={n}" for k, n in sorted(sizes.items()))
            raise WorkbenchError(
                f"--equivalence must hold at most {ELEMENTS_MAX} elements in the interpreter "
                f"(every value on each of {ranks} virtual ranks), got more than that at "
                f"{shown} ({v.name} alone: {numel} per rank); check small sizes: lower --set "
                "or --ranks, or pass --force to run anyway")


def check_equivalence(loaded, ranks: int, sizes: Mapping[str, int] | None = None,
                      each: Callable[[list], Iterable] = iter,
                      searching: Callable[[], AbstractContextManager] = nullcontext,
                      generated: Callable[[list], list] | None = None,
                      force: bool = False) -> str:
    """`workbench check --equivalence`: every named schedule of a loaded program file and every
    autotuner candidate against the unscheduled program; the summary line, or a VerifyError
    listing each mismatch by statement. `each` walks the (name, program) pairs (the command's
    progress bar) and `searching` is entered while the autotuner searches (its spinner);
    `generated` keeps, of the search's candidates, the (name, program) pairs the GPU backend
    generates (the command's filter, which lowers: the others are never proposed, so they are
    not run either). `force`: past the work limits (RANKS_MAX ranks, ELEMENTS_MAX elements),
    which only bound the time and memory the interpreter takes."""
    from workbench import autotune
    from workbench.errors import VerifyError, WorkbenchError

    if ranks < 1 or (ranks > RANKS_MAX and not force):
        raise WorkbenchError(f"--ranks must be from 1 to {RANKS_MAX} (virtual ranks of the "
                             f"interpreter, each a copy of its values), got {ranks}; e.g. "
                             "--ranks 4" + (", or pass --force to run anyway" if ranks > 1
                                            else ""))
    program = loaded.program
    run_sizes = {**small_sizes(program, ranks), **dict(sizes or {}), "P": ranks}
    bound = bind_sizes(program, run_sizes)  # a --set that breaks a declared multiple fails here
    if not force:
        _check_elements(program, bound, ranks, run_sizes)
    items = [(name, s.apply()) for name, s in loaded.schedules.items()]
    with searching():
        found = autotune.search(program)
    if generated is None:
        proposed = [(c.name, c.program) for c in found.candidates[1:]]
    else:
        proposed = [(name.removeprefix("auto:"), p) for name, p in generated(found.candidates)]
    items += [(f"candidate {name}", p) for name, p in proposed]
    bad = [m for name, p in each(items)
           if (m := compare_schedule(name, program, p, run_sizes)) is not None]
    shown = ", ".join(f"{k}={v}" for k, v in sorted(run_sizes.items()))
    if bad:
        raise VerifyError(f"{len(bad)} of {len(items)} schedules and candidates must keep the "
                          f"program's meaning, got mismatches on {ranks} ranks at {shown}:\n"
                          + "\n".join(f"  {m}" for m in bad))
    named = len(loaded.schedules)
    return (f"equivalence: {named} named schedule(s) and {len(items) - named} autotuner "
            f"candidate(s) match the unscheduled program in the interpreter on {ranks} "
            f"virtual ranks at {shown}")
