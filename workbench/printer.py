"""The stable printed form of a program (what `workbench show` prints and golden tests pin).

    program sgd(N, P) where N % P == 0
      in  g: f32[N] Local
      in  w: f32[N] Replicated
      in  lr: f32[] Replicated
      g1 = AllReduce(Sum, g)                       : f32[N] Replicated
      w1 = Update(w, w - lr * g1)                  : f32[N] Replicated
      out w1
"""

from __future__ import annotations

from workbench.ir import Fused, Overlapped, Program, Stmt

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
