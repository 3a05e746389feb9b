"""Schedules: named, replayable sequences of transforms applied to a program.

In a program file:

    @schedule(program)
    def fused(s):
        rs, ag = s.split(g1)            # AllReduce -> ReduceScatter + AllGather
        s.reorder(w1, before=ag)        # the update runs on slices
        s.fuse(rs, w1, ag)              # one FusedAllReduce kernel

`s` is a Scheduler: each method builds one transform (workbench.transforms), applies it to the
current program (pure IR -> IR, verified) and records it, so a schedule is also its trace of
transforms, which is what the autotuner saves as JSON and replays.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from workbench import interrupts, ir
from workbench.dsl.trace import Node
from workbench.errors import IllegalTransform, WorkbenchError
from workbench.files import check_name
from workbench.transforms import (
    AllReduceAlgorithm,
    AsSlice,
    CopyEngines,
    DeadCodeElimination,
    Fuse,
    HierarchicalSplit,
    Overlap,
    PipelineHierarchy,
    Reorder,
    RingFuse,
    Split,
)


def _name(x) -> str:
    """A value's name from a DSL handle (the node a DSL call returned) or a string."""
    if isinstance(x, str):
        return x
    name = getattr(x, "traced_name", None) or getattr(x, "name", None)
    if isinstance(name, str):
        return name
    if isinstance(x, Node):
        # Arithmetic, in the schedule (`s.fuse(ar, ar + r)` builds a new expression) or inlined
        # by the program into the statements that read it: no statement computes it.
        text = _expression_text(x)
        where = f", built at {x.loc}," if getattr(x, "loc", "") else ""
        raise WorkbenchError(
            "schedule argument must be a value of the program (a DSL handle of a statement, "
            f"or its name), got the expression {text}{where} which no statement computes "
            "(inline arithmetic is computed inside each statement that reads it); make it a "
            f"statement in the program, `h = Compute({text}, name=\"h\")`, and pass h")
    text = repr(x)
    raise WorkbenchError("schedule argument must be a value of the program (a DSL handle or "
                         f"a name), got {type(x).__name__} "
                         f"{text if len(text) <= 60 else text[:57] + '...'}")


def _expression_text(x, depth: int = 0) -> str:
    """A DSL expression as the user wrote it, short: names of values, literals, operators
    (deeper than two levels: `...`)."""
    from workbench.ir.expressions import BINARY_OPS

    name = getattr(x, "traced_name", None) or getattr(x, "name", None)
    if isinstance(name, str):
        return name
    if not hasattr(x, "kind"):
        return f"{getattr(x, 'value', '...'):g}" if isinstance(getattr(x, "value", None),
                                                                float) else "..."
    if depth > 2:
        return "..."
    args = [_expression_text(a, depth + 1) for a in x.args]
    if x.kind == "binary" and x.params[0] in BINARY_OPS and len(args) == 2:
        sym = BINARY_OPS[x.params[0]]
        if sym.isidentifier():
            return f"{sym}({args[0]}, {args[1]})"
        return f"{args[0]} {sym} {args[1]}" if depth == 0 else f"({args[0]} {sym} {args[1]})"
    return f"{x.params[0] if x.params else x.kind}({', '.join(args)})"


class Scheduler:
    """The object a schedule function receives; holds the current program and the trace."""

    def __init__(self, program: ir.Program):
        self.program = program
        self.trace: list = []

    def apply(self, transform):
        """Apply one transform (checked, verified) and record it; returns what it returns."""
        before = self.program
        self.program = transform.apply(before)
        self.trace.append(transform)
        return transform.results(before, self.program)

    def split(self, allreduce) -> tuple[str, str]:
        """AllReduce -> ReduceScatter + AllGather; returns (reduce-scatter, all-gather) names."""
        return self.apply(Split(_name(allreduce)))

    def hierarchical_split(self, allreduce, per_node: int = 8) -> tuple[str, str, str]:
        """AllReduce -> ReduceScatter inside each node of `per_node` GPUs, AllReduce of the
        slice across nodes, AllGather inside each node; returns the three names."""
        return self.apply(HierarchicalSplit(_name(allreduce), per_node))

    def pipeline_hierarchy(self, allreduce, chunks: int = 4) -> str:
        """Run a hierarchical split's three legs (node ReduceScatter, AllReduce across nodes,
        node AllGather fused with the update) chunk by chunk, overlapped; `allreduce` is the
        split's second name. Returns the gathered output's name."""
        return self.apply(PipelineHierarchy(_name(allreduce), chunks))

    def ring(self, region) -> str:
        """Carry a fused AllReduce over NCCL's ring across nodes, the update applied per chunk
        as it arrives (CoCoNet's form; transforms.RingFuse: simulated, not generated)."""
        return self.apply(RingFuse(_name(region)))

    def reorder(self, *values, before) -> tuple[str, ...]:
        """Move the computations `values` that read AllGather `before`'s output ahead of it,
        onto slices: each runs on its rank's slice, a value a later statement needs whole is
        gathered where first needed, a norm or a scalar stays Replicated. Refused, naming
        it, where a statement left behind reads the gathered value and is read by a moved
        one. Returns the moved values' names in order (`w1_s`; a norm keeps its name)."""
        return self.apply(Reorder(tuple(_name(v) for v in values), _name(before)))

    def as_slice(self, *values) -> None:
        """Keep these program inputs/outputs Sliced (each rank owns its slice of the state)."""
        return self.apply(AsSlice(tuple(_name(v) for v in values)))

    def fuse(self, *values, kind: str | None = None) -> str:
        """Run the statements `values` as one kernel (they are made consecutive where
        legal): ReduceScatter + computation on slices + AllGather (FusedAllreduce), a whole
        AllReduce + a norm or softmax on rows, consecutive elementwise statements, computation
        + a Send, a MatMul + its elementwise epilogue (in the GEMM where cuBLASLt can), a
        Reduce / Broadcast + computation at the root, an AllToAll + the computation around
        it (ir.Fused lists the forms; `kind` asserts one). Refused with the reason when the
        statements match no kernel or the fuse would change nothing; an index op (Gather,
        TopK) runs alone. Returns the region's first name."""
        return self.apply(Fuse(tuple(_name(v) for v in values), kind))

    def overlap(self, producer, consumer, chunks: int = 4) -> str:
        """Run `producer` and `consumer` chunk by chunk (`chunks` pieces) on two streams,
        piece i of the consumer after piece i of the producer: a MatMul then an AllReduce, a
        fused AllReduce or a ReduceScatter of its output; an AllGather then the MatMul that
        reads it; an elementwise kernel then an AllReduce, Broadcast or Reduce of it; an
        AllReduce then a fused Send; a fused Send then an AllGather; an AllToAll and the
        MatMul that reads it, or a MatMul and the AllToAll of it. Returns the producer's
        name."""
        return self.apply(Overlap(_name(producer), _name(consumer), chunks))

    def copy_engines(self, region, chunks: int = 8) -> str:
        """Move a fused collective's bytes by copy engines, `chunks` pieces per slice, while a
        kernel computes on the pieces that have arrived (transforms.CopyEngines)."""
        return self.apply(CopyEngines(_name(region), chunks))

    def allreduce_algorithm(self, region, algorithm: str) -> str:
        """How the fused region `region` (a whole AllReduce fused with the norm or softmax
        after it: `s.fuse(ar, "t0", out)`) moves its bytes, its values unchanged: "two-shot"
        (rows reduce-scattered and all-gathered by peer accesses, the default), "pipelined"
        (two-shot's bytes, the computation on part of the grid as each row group lands),
        "one-shot" (every rank reduces every row from its peers' inputs: one pass, (P - 1) x
        the input over its links) or "lamport" (one-shot by pushes into poisoned receive
        buffers, no barrier: small sizes). transforms.ALLREDUCE_ALGORITHMS says each in full;
        studies/allreduce_rmsnorm.py names all four. Returns the region's name."""
        return self.apply(AllReduceAlgorithm(_name(region), algorithm))

    def dce(self) -> None:
        """Remove statements no output needs."""
        return self.apply(DeadCodeElimination())


@dataclass(frozen=True)
class Schedule:
    """A named schedule of a program: a function of a Scheduler."""

    name: str
    program: ir.Program
    fn: Callable = field(compare=False)
    doc: str = ""

    def run(self) -> Scheduler:
        """Run the schedule function; an error in it names the schedule and the line of the
        call that failed (file:line), whatever transform raised it."""
        s = Scheduler(self.program)
        try:
            with no_hard_exit():
                self.fn(s)
        except WorkbenchError as e:
            raise type(e)(f"schedule {self.name} ({self.where(sys.exc_info()[2])}): {e}"
                          ) from None
        except BaseException as e:  # user code may raise anything (KeyboardInterrupt,
            # GeneratorExit, a BaseException of its own: a traceback or exit 1), or exit
            if interrupts.received():
                raise  # the user's Ctrl-C or SIGTERM as it ran: theirs, not the schedule's
            what = (e.code if isinstance(e, HardExit) else f"exit({e.code})"
                    if isinstance(e, SystemExit) else f"{type(e).__name__}: {e}")
            raise IllegalTransform(
                f"schedule {self.name} ({self.where(sys.exc_info()[2])}) must run without "
                f"errors, got {what}; fix the schedule function (workbench --debug shows the "
                "traceback)") from e
        if not isinstance(s.program, ir.Program):
            raise IllegalTransform(
                f"schedule {self.name} ({self.where()}) must leave a Program in s.program, got "
                f"{type(s.program).__name__}; change the program through s's transforms only")
        return s

    def where(self, tb=None) -> str:
        """file:line of the schedule function's line in traceback `tb` (the failing call), or
        of its definition."""
        code = self.fn.__code__
        line = code.co_firstlineno
        for frame in traceback.extract_tb(tb) if tb is not None else ():
            if frame.filename == code.co_filename and frame.name == code.co_name:
                line = frame.lineno
        return f"{Path(code.co_filename).name}:{line}"

    def apply(self) -> ir.Program:
        """The scheduled program."""
        return self.run().program

    def transforms(self) -> tuple:
        """The transforms this schedule applies, in order (replayable)."""
        return tuple(self.run().trace)


class HardExit(SystemExit):
    """os._exit called by user code while no_hard_exit is active."""


@contextlib.contextmanager
def no_hard_exit() -> Iterator[None]:
    """While user code runs (a program file, a schedule function), os._exit raises HardExit
    instead of ending the process on the spot: the CLI can then say which file or schedule
    exited, with exit code 2, rather than vanish with the user's code. (Python code can
    always end its process some other way, e.g. by a signal; a program file is trusted code.)"""
    import os

    modules = [os] + ([sys.modules["posix"]] if "posix" in sys.modules else [])
    real = os._exit

    def refuse(code=0):
        raise HardExit(f"os._exit({code})")

    for module in modules:
        module._exit = refuse
    try:
        yield
    finally:
        for module in modules:
            module._exit = real


# Schedules made while a program file runs (see `collecting`): the loader finds a schedule
# that a builder function made and returned without binding it at module level.
_collectors: list[list[Schedule]] = []


@contextlib.contextmanager
def collecting() -> Iterator[list[Schedule]]:
    """Collect every Schedule that `schedule(...)` makes inside the `with` block."""
    made: list[Schedule] = []
    _collectors.append(made)
    try:
        yield made
    finally:
        _collectors.remove(made)


def schedule(program: ir.Program, name: str | None = None):
    """Decorator: register a function of a Scheduler as a named schedule of `program`. The
    name must be a plain name (files.check_name): `compile` and `compile-and-measure` name
    folders and files after it."""
    if name is not None:
        check_name(name, "a schedule's name (@schedule(program, name=...))",
                   "pick a name such as 'fused-rs-ag'")

    def wrap(fn: Callable) -> Schedule:
        made = Schedule(name or fn.__name__.replace("_", "-"), program, fn,
                        (fn.__doc__ or "").strip())
        for collector in _collectors:
            collector.append(made)
        return made

    return wrap
