"""A lowered Plan as a file that loads back into the same Plan (`plan.json`, written by
`workbench compile`, read by `compile-and-measure`'s ranks): what runs is lowered once and
shipped as is, never re-lowered from the program file.

The file is data and runs no code when read: every record names one of a fixed set of
classes (the plan's steps and buffers, kernel specs, the IR of the program it was lowered
from, codegen options), and a size expression is text parsed by a small grammar of its own
(numbers, the file's symbols, + - * / ** and a few functions), never by `eval` or sympy's
`sympify`. The format carries its version (`PLAN_FORMAT_VERSION`); a file of another version
is refused with the reason and the fix (compile again), never half-read.

    {"format": "workbench-plan", "version": 2,
     "symbols": {"N": {"integer": true, "positive": true}, ...},
     "plan": {"class": "Plan", "program": {...}, "P": 4, "buffers": [...], "steps": [...], ...}}

A record is {"class": CLASS, FIELD: value, ...}; a sequence is a list (a tuple when loaded);
an enum member is {"enum": CLASS, "value": ...}; a dict is {"class": "dict", "items": {...}}; a
size expression is {"expr": TEXT}. A size symbol's assumptions (integer, positive, ...) are
part of its identity in sympy, so the file lists each symbol once with them.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import json
import operator
from collections.abc import Mapping
from pathlib import Path

import sympy

from codegen import plan as plan_types
from codegen import spec as spec_types
from codegen.plan import Plan
from workbench import ir
from workbench import options as options_module
from workbench import types as types_module
from workbench.errors import WorkbenchError
from workbench.ir import communication, computation, epilogue, expressions, program, regions

PLAN_FORMAT = "workbench-plan"
# 1: the first loadable plan (issue 38). 2: a kernel step carries its flops, dropout masks,
# their dtype and its grid rule (KernelStep.flops, .dropouts, .flops_dtype, .grid_rule), the
# steps their Origin records, and RingFusedStep is a step (decision 104). Raise it
# whenever a record's fields change meaning; a loader of one version refuses files of every
# other (there is no migration).
PLAN_FORMAT_VERSION = 2

_MODULES = (types_module, expressions, computation, communication, regions, program, epilogue,
            spec_types, plan_types, options_module)


class PlanFileError(WorkbenchError):
    """A plan file that cannot be loaded: another format or version, or a record this
    version does not know."""


def _classes() -> dict[str, type]:
    """Every class a plan file may name, by name: the dataclasses and enums of the plan's
    modules (two classes of one name would make a file ambiguous: refused here)."""
    found: dict[str, type] = {}
    for module in _MODULES:
        for name, obj in vars(module).items():
            if not isinstance(obj, type) or obj.__module__ != module.__name__:
                continue
            if not (dataclasses.is_dataclass(obj) or issubclass(obj, enum.Enum)):
                continue
            if name in found and found[name] is not obj:
                raise AssertionError(f"plan file classes must have distinct names, got "
                                     f"{name} in {found[name].__module__} and {module.__name__}")
            found[name] = obj
    return found


_CLASSES = _classes()


# ---------------------------------------------------------------- writing


def plan_file_record(plan: Plan) -> dict:
    """The plan as the JSON-ready record of its file (see the module docstring)."""
    return _file_record("plan", plan)


def plan_json(plan: Plan) -> str:
    """The text of the plan's file (`plan.json`)."""
    return json.dumps(plan_file_record(plan), indent=1) + "\n"


def program_json(program: ir.Program, sizes: Mapping[str, int]) -> str:
    """The text of a compiled folder's `program.json`: the program as written (what the
    ranks draw inputs for and check every schedule's outputs against, in the reference
    interpreter) and its file's default sizes, in the plan file's format."""
    record = _file_record("program", program)
    record["sizes"] = {k: int(v) for k, v in sizes.items()}
    return json.dumps(record, indent=1) + "\n"


def _file_record(key: str, obj) -> dict:
    symbols: dict[str, dict] = {}
    body = _encode(obj, symbols)
    return {"format": PLAN_FORMAT, "version": PLAN_FORMAT_VERSION, "symbols": symbols,
            key: body}


def _encode(x, symbols: dict):
    if isinstance(x, sympy.Basic):
        return {"expr": _expr_text(x, symbols)}
    if isinstance(x, enum.Enum):
        return {"enum": type(x).__name__, "value": x.value}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        name = type(x).__name__
        if _CLASSES.get(name) is not type(x):
            raise TypeError(f"a plan file must hold only the classes of codegen.plan_file, "
                            f"got {type(x).__module__}.{name}; add its module to _MODULES")
        return {"class": name, **{f.name: _encode(getattr(x, f.name), symbols)
                                 for f in dataclasses.fields(x) if f.init}}
    if isinstance(x, (tuple, list)):
        return [_encode(v, symbols) for v in x]
    if isinstance(x, dict):
        if not all(isinstance(k, str) for k in x):
            raise TypeError(f"a plan file's dicts must have str keys, got {list(x)[:3]}")
        return {"class": "dict", "items": {k: _encode(v, symbols) for k, v in x.items()}}
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise TypeError(f"a plan file must hold only records, sequences, numbers, strings and "
                    f"size expressions, got {type(x).__name__}: {x!r}")


def _expr_text(e: sympy.Basic, symbols: dict) -> str:
    """The expression as text, its symbols entered in `symbols` with their assumptions; the
    text must parse back to the same expression (checked: a plan that would load as another
    is a bug of this module, refused when written)."""
    for s in e.free_symbols:
        given = dict(getattr(s, "_assumptions_orig", None) or s.assumptions0)
        if symbols.setdefault(s.name, given) != given:
            raise TypeError(f"a plan's symbols must have one set of assumptions per name, got "
                            f"{s.name} with {symbols[s.name]} and {given}")
    text = sympy.sstr(e, full_prec=True)
    table = {name: sympy.Symbol(name, **a) for name, a in symbols.items()}
    if _parse_expr(text, table) != e:
        raise TypeError(f"a plan's size expression must read back as itself, got {text!r} "
                        f"for {sympy.srepr(e)}")
    return text


# ---------------------------------------------------------------- reading


def load_plan(path: str | Path) -> Plan:
    """The Plan written to `path` (a plan.json of `workbench compile`). Refuses, naming the
    file, what is not a plan file of this version."""
    return plan_from_record(_read(path), str(path))


def load_program(path: str | Path) -> tuple[ir.Program, dict[str, int]]:
    """The program and default sizes of a compiled folder's `program.json` (`program_json`)."""
    record = _read(path)
    program = _from_record(record, "program", ir.Program, str(path))
    return program, {k: int(v) for k, v in record.get("sizes", {}).items()}


def plan_from_record(record, where: str = "the plan") -> Plan:
    """The Plan of a plan file's record (`plan_file_record`)."""
    return _from_record(record, "plan", Plan, where)


def _read(path: str | Path):
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PlanFileError(f"a plan file must be readable JSON, got {path}: {e}; write it "
                            "again with workbench compile") from None


def _from_record(record, key: str, cls: type, where: str):
    if not isinstance(record, dict) or record.get("format") != PLAN_FORMAT:
        got = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise PlanFileError(f"{where} must be a {PLAN_FORMAT} file, got format {got!r}; write "
                            "it with workbench compile")
    version = record.get("version")
    if version != PLAN_FORMAT_VERSION:
        raise PlanFileError(f"{where} must be of plan format version {PLAN_FORMAT_VERSION} "
                            f"(this workbench's), got version {version!r}; compile the program "
                            "again with this workbench (workbench compile), or run it with "
                            "the workbench that wrote it")
    try:
        table = {name: sympy.Symbol(name, **dict(a)) for name, a in record["symbols"].items()}
        obj = _decode(record[key], table)
    except (KeyError, TypeError, ValueError, SyntaxError) as e:
        raise PlanFileError(f"{where} must hold a {key} of plan format version {version}, got "
                            f"a record this version cannot read ({type(e).__name__}: {e}); "
                            "compile the program again with workbench compile") from None
    if not isinstance(obj, cls):
        raise PlanFileError(f"{where} must hold a {cls.__name__} record, got "
                            f"{type(obj).__name__}; write it with workbench compile")
    return obj


def _decode(x, symbols: Mapping[str, sympy.Symbol]):
    if isinstance(x, list):
        return tuple(_decode(v, symbols) for v in x)
    if not isinstance(x, dict):
        return x
    if "class" not in x:
        if "expr" in x:
            return _parse_expr(x["expr"], symbols)
        cls = _CLASSES[x["enum"]]
        if not issubclass(cls, enum.Enum):
            raise TypeError(f"{x['enum']} is not an enum")
        return cls(x["value"])
    name = x["class"]
    if name == "dict":
        return {k: _decode(v, symbols) for k, v in x["items"].items()}
    cls = _CLASSES.get(name)
    if cls is None or not dataclasses.is_dataclass(cls):
        raise TypeError(f"unknown record type {name!r}")
    fields = {k: _decode(v, symbols) for k, v in x.items() if k != "class"}
    return cls(**fields)


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_FUNCTIONS = {"floor": sympy.floor, "ceiling": sympy.ceiling, "Mod": sympy.Mod,
              "Max": sympy.Max, "Min": sympy.Min, "sqrt": sympy.sqrt, "Abs": sympy.Abs,
              "log": sympy.log, "exp": sympy.exp, "Rational": sympy.Rational}
_CONSTANTS = {"pi": sympy.pi, "E": sympy.E, "oo": sympy.oo}


def _parse_expr(text: str, symbols: Mapping[str, sympy.Symbol]) -> sympy.Expr:
    """A size expression from its text: numbers, `symbols`, + - * / ** and _FUNCTIONS only
    (no attribute, subscript or other call: the text is data)."""
    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](walk(node.operand))
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return (sympy.Integer(node.value) if isinstance(node.value, int)
                    else sympy.Float(repr(node.value)))
        if isinstance(node, ast.Name):
            if node.id in symbols:
                return symbols[node.id]
            if node.id in _CONSTANTS:
                return _CONSTANTS[node.id]
            raise ValueError(f"size expression {text!r} names {node.id!r}, which is no "
                             "symbol of the file")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in _FUNCTIONS and not node.keywords):
            return _FUNCTIONS[node.func.id](*(walk(a) for a in node.args))
        raise ValueError(f"size expression {text!r} must use numbers, symbols, + - * / ** "
                         f"and {', '.join(_FUNCTIONS)} only, got {ast.dump(node)[:60]}")

    return walk(ast.parse(text, mode="eval"))
