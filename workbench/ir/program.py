"""Statements and programs (straight-line SSA over named values), and the program's stable
printed form (what `workbench show` prints and golden tests pin).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import sympy

from workbench.ir.expressions import Facts, SizeValue, Value, expr_nodes
from workbench.ir.ops import Fused, Overlapped
from workbench.ir.regions import Stmt
from workbench.types import (
    Group,
)


@dataclass(frozen=True, slots=True)
class Program:
    """A distributed program: inputs, straight-line statements, outputs.

    `facts` holds what the user declared about sizes: (N, m) means N is a multiple of m, which
    is what proves a Sliced dim divisible by the group size.
    """

    name: str
    inputs: tuple[Value, ...]
    stmts: tuple[Stmt, ...]
    outputs: tuple[Value, ...]
    facts: Facts = ()
    # Where random test inputs are drawn from, per input: (name, low, high); e.g. a second
    # moment must be >= 0. Inputs not listed draw from a standard normal.
    input_ranges: tuple[tuple[str, float, float], ...] = ()
    # The output contract: positions in `outputs` whose storage a schedule may change to
    # Sliced (each rank keeps only its slice: optimizer state, ZeRO-style). Every other output
    # is returned as the program as written returns it, by every schedule.
    may_stay_sliced: tuple[int, ...] = ()

    def groups(self) -> tuple[Group, ...]:
        seen = dict.fromkeys(v.type.group for v in self.all_values())
        return tuple(seen)

    def all_values(self) -> Iterator[Value]:
        yield from self.inputs
        for s in self.stmts:
            yield from s.outs

    def value(self, name: str) -> Value:
        for v in self.all_values():
            if v.name == name:
                return v
        raise KeyError(name)

    def stmt_defining(self, name: str) -> Stmt:
        """The top-level statement that defines `name` (a region, if it is defined inside one)."""
        for s in self.stmts:
            if any(v.name == name for v in s.outs):
                return s
        raise KeyError(name)

    def leaves(self) -> Iterator[Stmt]:
        for s in self.stmts:
            yield from s.leaves()

    def dead_after(self, name: str, leaf: Stmt) -> bool:
        """No leaf after `leaf` reads `name`, and it is no program output: a collective on
        `name` at `leaf` may then run in place (the GPU backend's storage rule, which the cost
        model must price alike)."""
        leaves = list(self.leaves())
        later = leaves[next(i for i, s in enumerate(leaves) if s is leaf) + 1:]
        return (not any(name in s.op.operands() for s in later)
                and not any(v.name == name for v in self.outputs))

    def symbols(self) -> tuple[sympy.Symbol, ...]:
        """Every size symbol the program's types use, sorted by name (group sizes included)."""
        syms: set[sympy.Symbol] = set()
        for v in self.all_values():
            syms |= v.type.size_symbols()
        for stmt in self.leaves():  # sizes used as numbers inside expressions (x / H)
            expr = getattr(stmt.op, "expr", None)
            if expr is not None:
                for node in expr_nodes(expr):
                    if isinstance(node, SizeValue):
                        syms |= node.expr.free_symbols
        return tuple(sorted(syms, key=lambda s: s.name))

    def sizes_by_symbol(self, sizes) -> dict[sympy.Symbol, int]:
        """`sizes` keyed by this program's own size symbols, each value an int. A key may be
        a size's name or any sympy Symbol of that name: `sympy.Symbol("N")`, made in a
        notebook without the DSL's assumptions (integer, positive), is another symbol to
        sympy, and substituting it would leave N unbound. Keys of no size of the program are
        left out."""
        by_name = {getattr(k, "name", k): v for k, v in sizes.items()}
        return {s: int(by_name[s.name]) for s in self.symbols() if s.name in by_name}

    def with_stmts(self, stmts, outputs=None, inputs=None) -> Program:
        return Program(self.name, tuple(inputs if inputs is not None else self.inputs),
                       tuple(stmts), tuple(outputs if outputs is not None else self.outputs),
                       self.facts, self.input_ranges, self.may_stay_sliced)

    def __str__(self) -> str:
        return format_program(self)


_TYPE_COLUMN = 48


def _format_stmt(stmt: Stmt, indent: str) -> list[str]:
    if isinstance(stmt.op, (Fused, Overlapped)):
        lines = [f"{indent}{', '.join(v.name for v in stmt.outs)} = {stmt.op} {{"]
        for inner in stmt.op.body:
            lines += _format_stmt(inner, indent + "  ")
        return lines + [f"{indent}}}"]
    head = f"{indent}{stmt.out.name} = {stmt.op}"
    return [f"{head.ljust(_TYPE_COLUMN)} : {stmt.out.type}"]


def format_program(program: Program, mark: str | None = None) -> str:
    """Print a program; `mark` names a value whose statement gets a '>>' marker (errors)."""
    symbols = ", ".join(s.name for s in program.symbols())
    facts = ", ".join(f"{s} % {m} == 0" for s, m in program.facts)
    lines = [f"program {program.name}({symbols})" + (f" where {facts}" if facts else "")]
    groups = program.groups()
    if len(groups) > 1:
        lines += [f"  group {g}" for g in groups]
    ranges = {name: (lo, hi) for name, lo, hi in program.input_ranges}
    lines += [f"  in  {v.name}: {v.type}"
              + (f" in [{ranges[v.name][0]:g}, {ranges[v.name][1]:g}]" if v.name in ranges else "")
              for v in program.inputs]
    for stmt in program.stmts:
        text = _format_stmt(stmt, "  ")
        if mark is not None and any(v.name == mark for v in stmt.outs):
            text = [">> " + line[2:] for line in text]
        lines += text
    lines.append("  out " + ", ".join(v.name for v in program.outputs))
    return "\n".join(lines)

