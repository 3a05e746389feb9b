"""What every transform shares: Legality, the Transform base class (check never raises, apply
verifies), and the helpers that read and rebuild programs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import ClassVar

from workbench import ir
from workbench.errors import IllegalTransform, VerifyError, WorkbenchError
from workbench.verify import verify


@dataclass(frozen=True, slots=True)
class Legality:
    """Whether a transform applies; `reason` says why not (which op, which precondition)."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def fresh_name(program: ir.Program, base: str, taken: set[str] | None = None) -> str:
    names = {v.name for v in program.all_values()} | {v.name for s in program.leaves()
                                                      for v in s.outs}
    names |= taken or set()
    name, i = base, 1
    while name in names:
        i += 1
        name = f"{base}{i}"
    return name


def top_index(program: ir.Program, name: str, who: str) -> int:
    for i, s in enumerate(program.stmts):
        if any(v.name == name for v in s.outs):
            return i
    if any(v.name == name for v in program.inputs):
        raise IllegalTransform(f"{who}: '{name}' must be a statement, got a program input")
    raise IllegalTransform(f"{who}: '{name}' must be a value of program {program.name}, got no "
                           f"such value")


def plain_stmts(program: ir.Program, name: str, who: str) -> tuple[int, ir.Stmt]:
    """Index and statement of a plain (not yet fused) top-level statement defining `name`."""
    i = top_index(program, name, who)
    stmt = program.stmts[i]
    if isinstance(stmt.op, ir.REGION_OPS):
        raise IllegalTransform(f"{who}: '{name}' must be a plain statement, got it inside "
                               f"{stmt.op}; apply this transform before fusing")
    return i, stmt


def readers_of(stmts, name: str) -> list[int]:
    return [i for i, s in enumerate(stmts) if name in s.op.operands()]


def retyped(stmt: ir.Stmt, env: dict, name: str | None = None) -> ir.Stmt:
    """The statement with its result type re-inferred (after its operands changed layout)."""
    out = stmt.out
    t = stmt.op.infer(env, f"{out.name} = {stmt.op}")
    return ir.Stmt((ir.Value(name or out.name, t),), stmt.op, stmt.loc)


def env_before(program: ir.Program, index: int) -> dict:
    env = {v.name: v.type for v in program.inputs}
    for s in program.stmts[:index]:
        for leaf in s.leaves():
            env[leaf.out.name] = leaf.out.type
    return env


def dead_code_eliminated(program: ir.Program) -> ir.Program:
    """Drop top-level statements whose values nothing reads (regions only when wholly dead)."""
    live = {v.name for v in program.outputs}
    kept = []
    for stmt in reversed(program.stmts):
        if any(v.name in live for v in stmt.outs):
            kept.append(stmt)
            live.update(stmt.op.operands())
    return program.with_stmts(reversed(kept))


def check_output_contract(name: str, before: ir.Program, after: ir.Program) -> None:
    """A schedule means the same program: every output keeps its storage (whole on every
    rank, or sliced) unless the program declared that it may stay sliced."""
    for k, (old, new) in enumerate(zip(before.outputs, after.outputs)):
        if old.type.layout != new.type.layout and k not in before.may_stay_sliced:
            raise IllegalTransform(
                f"{name} must keep output {old.name} stored as the program returns it "
                f"({old.type.layout}), got {new.type.layout}; if each rank needs only its "
                f"slice (optimizer state, ZeRO-style), declare it: Program(..., "
                f"may_stay_sliced=[{old.name}])")


class Transform:
    """Base of every transform: `check` is `apply` with the exception turned into a reason."""

    name: ClassVar[str]

    def rewrite(self, program: ir.Program) -> ir.Program:  # pragma: no cover - abstract
        raise NotImplementedError

    def apply(self, program: ir.Program) -> ir.Program:
        """The rewritten program, verified; raises IllegalTransform when a precondition fails."""
        try:
            out = self.rewrite(program)
        except IllegalTransform:
            raise
        except WorkbenchError as e:  # a type rule refused the rewritten statement
            raise IllegalTransform(f"{self.name}: {e}") from None
        check_output_contract(self.name, program, out)
        try:
            return verify(out)
        except VerifyError as e:
            # A rewrite that builds what the verifier rejects is refused as the transform's
            # own illegality, naming the statement (never a program left half-transformed).
            where = str(e).split("\n\nin program:")[0]
            raise IllegalTransform(f"{self}: the rewritten program must verify, got {where}; "
                                   "leave this transform out or move the statement it names "
                                   "first") from None

    def check(self, program: ir.Program) -> Legality:
        """ok, or the reason this transform does not apply to `program`."""
        try:
            self.apply(program)
        except WorkbenchError as e:
            return Legality(False, str(e).split("\n\nin program:")[0])
        return Legality(True)

    def results(self, before: ir.Program, after: ir.Program):
        """What a Scheduler call returns after this transform (names of new values)."""
        return None

    def to_json(self) -> dict:
        return {"transform": self.name, **asdict(self)}

    def __str__(self) -> str:
        args = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"{self.name}({args})"

