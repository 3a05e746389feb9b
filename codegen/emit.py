"""A lowered Plan as files a researcher reads without a GPU (`workbench compile`): each
generated kernel's CUDA source, and the plan itself, as JSON and as text: its buffers, and its
steps in order with the groups (pipeline stages) that run them, their statements, buffers,
counts and kernels.

The dump is generic over the plan's step dataclasses (codegen.plan), so a new step kind or
field appears in it without a change here. Sizes stay expressions (the plan is size-generic);
given sizes, the text also shows each count's value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import sympy

from codegen.plan import Plan
from codegen.spec import KernelSpec


def sources(plan: Plan) -> dict[str, str]:
    """Each generated kernel's CUDA source by file name (NAME.cu, NAME its mangled entry
    point), once per kernel, in the order the plan launches them."""
    return {f"{spec.name}.cu": plan.source(spec) for spec in plan.kernels()}


def plan_record(plan: Plan) -> dict:
    """The plan as JSON-ready data: P, groups, options, buffers and steps (sizes unbound,
    expressions as text)."""
    groups = plan.step_groups or ((0,),) * len(plan.steps)
    return {
        "program": plan.program.name,
        "P": plan.P,
        "groups": list(plan.groups),
        "per_node": plan.per_node,
        "nodes": plan.nodes,
        "options": plan.options.as_dict(),
        "buffers": [_record(b) for b in plan.buffers],
        "steps": [{"groups": [plan.groups[g] for g in gs], **_record(s)}
                  for s, gs in zip(plan.steps, groups)],
        "kernels": [spec.name for spec in plan.kernels()],
    }


def plan_text(plan: Plan, sizes: Mapping[str, int] | None = None) -> str:
    """The plan as text: one line per buffer, one line per step (nested steps indented); with
    `sizes` (names to values), each size expression is followed by its value."""
    rec = plan_record(plan)
    bound = dict(sizes or {})
    view = f"; a node's view: {plan.per_node} GPUs x {plan.nodes} nodes" if plan.per_node else ""
    knobs = " ".join(f"{k}={v}" for k, v in plan.options.changed().items()) or "default"
    lines = [f"plan of {rec['program']} for P={plan.P} ranks per group, groups "
             f"{', '.join(plan.groups)}{view}; codegen options: {knobs}",
             f"buffers ({len(plan.buffers)}):"]
    for b in plan.buffers:
        extra = (" peer" if b.peer else "") + (f" input {b.holds_input}" if b.holds_input else "")
        lines.append(f"  {b.name}: {b.dtype}[{_expr(b.numel, bound)}] on "
                     f"{plan.groups[b.group]}{extra}")
    lines.append(f"steps ({len(rec['steps'])}):")
    for i, step in enumerate(rec["steps"]):
        where = ",".join(step.pop("groups"))
        lines += _step_lines(step, f"  {i} [{where}] ", "      ", bound)
    return "\n".join(lines) + "\n"


def _record(x):
    """A plan object as JSON-ready data: dataclasses by field (a kernel's spec by name, kind
    and template), sympy expressions as text."""
    if isinstance(x, KernelSpec):
        return {"kernel": x.name, "kind": x.kind, "template": x.template}
    if dataclasses.is_dataclass(x):
        return {"type": type(x).__name__,
                **{f.name: _record(getattr(x, f.name)) for f in dataclasses.fields(x)}}
    if isinstance(x, (tuple, list)):
        return [_record(v) for v in x]
    if isinstance(x, sympy.Basic):
        return str(x)
    return x


def _step_lines(step: dict, head: str, indent: str, bound) -> list[str]:
    """A step record as text: its type and scalar fields on one line, then its nested steps
    (overlap producer and consumer, chunked steps, copy-engine kernels) indented."""
    fields, nested = [], []
    for k, v in step.items():
        if k == "type":
            continue
        if isinstance(v, dict) and "type" in v and v["type"] != "Loc":
            nested.append((k, v))
        elif isinstance(v, list) and v and isinstance(v[0], dict) and "type" in v[0] \
                and v[0]["type"] not in ("Loc", "PeerCopy"):
            nested += [(f"{k}[{i}]", s) for i, s in enumerate(v)]
        else:
            fields.append(f"{k}={_text(v, bound)}")
    lines = [f"{head}{step['type']} " + " ".join(fields)]
    for k, v in nested:
        lines += _step_lines(v, f"{indent}{k}: ", indent + "  ", bound)
    return lines


def _text(v, bound) -> str:
    if v == "":
        return "-"
    if isinstance(v, dict) and v.get("type") == "Loc":
        return f"{v['buffer']}@{_expr(v['offset'], bound)}"
    if isinstance(v, dict) and "kernel" in v:
        return f"{v['kernel']}({v['kind']}, {v['template']})"
    if isinstance(v, list):
        return ",".join(_text(x, bound) for x in v) or "-"
    if isinstance(v, str) and bound:
        return _expr(v, bound)
    return str(v) if v != "" else "-"


def _expr(text, bound) -> str:
    """A size expression, with its value when `bound` makes it a number."""
    text = str(text)
    if not bound:
        return text
    names = {k: sympy.Symbol(k) for k in bound}  # N, S, E, ...: sizes here, not sympy's
    try:
        value = sympy.sympify(text, locals=names).subs({names[k]: v for k, v in bound.items()})
    except (sympy.SympifyError, TypeError, AttributeError):
        return text
    if value.is_Integer and str(value) != text:
        return f"{text} (= {value})"
    return text
