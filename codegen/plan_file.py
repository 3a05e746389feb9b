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
from workbench.files import read_bounded
from workbench.ir import communication, computation, epilogue, expressions, program, regions
from workbench.schemas import SIZES, check

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
    check(record, {"properties": {"sizes": SIZES}}, str(path), _FIX, PlanFileError)
    return program, dict(record.get("sizes", {}))


def plan_from_record(record, where: str = "the plan") -> Plan:
    """The Plan of a plan file's record (`plan_file_record`)."""
    return _from_record(record, "plan", Plan, where)


_FIX = "compile the program again with workbench compile"
# A plan file of the largest study is ~100 kB; far more is not one (and is not parsed).
PLAN_MAX_BYTES = 16 << 20


def _read(path: str | Path):
    """A plan file's JSON: a regular file in its folder (no link, FIFO or device), bounded,
    UTF-8, nested no deeper than JSON's recursion allows; errors quote none of it."""
    path = Path(path)
    data = read_bounded(path, "a plan file", _FIX, limit=PLAN_MAX_BYTES, error=PlanFileError)
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        why = ("bytes that are not UTF-8" if isinstance(e, UnicodeDecodeError) else
               f"invalid JSON at line {e.lineno} column {e.colno}"
               if isinstance(e, json.JSONDecodeError) else "nesting too deep")
        raise PlanFileError(f"a plan file must be readable JSON, got {path} with {why}; write "
                            "it again with workbench compile") from None


def _envelope(key: str) -> dict:
    """The schema of a plan file's outside: its symbols and the `key` record's class."""
    return {
        "type": "object", "description": f"a {PLAN_FORMAT} file", "required": ["symbols", key],
        "properties": {
            "symbols": {"type": "object", "description": "a mapping of symbol names to their "
                                                         "assumptions",
                        "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]{0,63}$"},
                        "additionalProperties": {
                            "type": "object", "description": "a mapping of assumptions "
                                                             "(integer, positive, ...) to booleans",
                            "propertyNames": {"pattern": "^[a-z_]{1,40}$"},
                            "additionalProperties": {"type": "boolean",
                                                     "description": "true or false"}}},
            key: {"type": "object", "required": ["class"],
                  "description": f"a record ({{\"class\": ...}}) of the {key}"},
        },
    }


def _from_record(record, key: str, cls: type, where: str):
    if not isinstance(record, dict) or record.get("format") != PLAN_FORMAT:
        got = ("no format field" if not isinstance(record, dict) or "format" not in record
               else "another format")
        raise PlanFileError(f"{where} must be a {PLAN_FORMAT} file, got {got}; write "
                            "it with workbench compile")
    version = record.get("version")
    if version != PLAN_FORMAT_VERSION:
        got = (f"version {version}" if isinstance(version, int) else
               "no version" if version is None else "a version that is not an integer")
        raise PlanFileError(f"{where} must be of plan format version {PLAN_FORMAT_VERSION} "
                            f"(this workbench's), got {got}; compile the program "
                            "again with this workbench (workbench compile), or run it with "
                            "the workbench that wrote it")
    check(record, _envelope(key), where, _FIX, PlanFileError)
    table = {name: sympy.Symbol(name, **a) for name, a in record["symbols"].items()}
    try:
        obj = _decode(record[key], table, key)
    except _Unreadable as e:
        raise PlanFileError(f"{where} field {e.at} must be {e.what}, got {e.got}; {_FIX}") \
            from None
    except RecursionError:
        raise PlanFileError(f"{where} must hold a {key} nested as a plan is, got records "
                            f"nested too deep; {_FIX}") from None
    if not isinstance(obj, cls):
        raise PlanFileError(f"{where} must hold a {cls.__name__} record, got "
                            f"{type(obj).__name__}; write it with workbench compile")
    return obj


class _Unreadable(Exception):
    """A record of a plan file that this version cannot read: where it is, what it must be
    and what it is (by kind, never by its text)."""

    def __init__(self, at: str, what: str, got: str):
        super().__init__(at)
        self.at, self.what, self.got = at, what, got


def _decode(x, symbols: Mapping[str, sympy.Symbol], at: str):
    if isinstance(x, list):
        return tuple(_decode(v, symbols, f"{at}[{i}]") for i, v in enumerate(x))
    if not isinstance(x, dict):
        return x
    if "class" not in x:
        if "expr" in x:
            return _parse_expr(x["expr"], symbols, f"{at}.expr")
        cls = _CLASSES.get(x["enum"]) if isinstance(x.get("enum"), str) else None
        if cls is None or not issubclass(cls, enum.Enum):
            raise _Unreadable(at, "a record ({\"class\": ...}), an enum ({\"enum\": ...}) or a "
                                  "size ({\"expr\": ...}) this version knows", "something else")
        try:
            return cls(x.get("value"))
        except ValueError:
            raise _Unreadable(f"{at}.value", f"a {cls.__name__} ("
                              f"{', '.join(str(m.value) for m in cls)})", "another value") \
                from None
    name = x["class"]
    if name == "dict":
        if not isinstance(x.get("items"), dict):
            raise _Unreadable(f"{at}.items", "a mapping", "something else")
        return {k: _decode(v, symbols, f"{at}.items.{k}") for k, v in x["items"].items()}
    cls = _CLASSES.get(name) if isinstance(name, str) else None
    if cls is None or not dataclasses.is_dataclass(cls):
        raise _Unreadable(f"{at}.class", "the name of a record class of codegen.plan_file",
                          "an unknown name")
    fields = {k: _decode(v, symbols, f"{at}.{k}") for k, v in x.items() if k != "class"}
    try:
        return cls(**fields)
    except (TypeError, ValueError, WorkbenchError):
        names = ", ".join(f.name for f in dataclasses.fields(cls) if f.init)
        raise _Unreadable(at, f"a {name} record of fields {names}", "other fields or values") \
            from None


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_FUNCTIONS = {"floor": sympy.floor, "ceiling": sympy.ceiling, "Mod": sympy.Mod,
              "Max": sympy.Max, "Min": sympy.Min, "sqrt": sympy.sqrt, "Abs": sympy.Abs,
              "log": sympy.log, "exp": sympy.exp, "Rational": sympy.Rational}
_CONSTANTS = {"pi": sympy.pi, "E": sympy.E, "oo": sympy.oo}


# A size expression of a lowered plan is tens of characters; a numeric exponent beyond this
# (9**9**9) would make sympy compute a number of millions of digits while the file is read.
EXPR_MAX_CHARS, EXPONENT_MAX = 1000, 64


def _parse_expr(text, symbols: Mapping[str, sympy.Symbol], at: str = "expr") -> sympy.Expr:
    """A size expression from its text: numbers, `symbols`, + - * / ** and _FUNCTIONS only
    (no attribute, subscript or other call: the text is data), at most EXPR_MAX_CHARS long,
    numeric exponents at most EXPONENT_MAX in size."""
    what = (f"a size expression of at most {EXPR_MAX_CHARS} characters: numbers, the file's "
            f"symbols, + - * / ** (numeric exponents of at most {EXPONENT_MAX}) and "
            f"{', '.join(_FUNCTIONS)}")
    if not isinstance(text, str) or len(text) > EXPR_MAX_CHARS:
        raise _Unreadable(at, what, "a string too long" if isinstance(text, str)
                          else "something else")

    def power(base, exponent):
        if exponent.is_number and not (abs(exponent) <= EXPONENT_MAX):
            raise _Unreadable(at, what, "a larger exponent")
        return base ** exponent

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            return power(walk(node.left), walk(node.right))
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
            raise _Unreadable(at, what, "a name that is no symbol of the file")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in _FUNCTIONS and not node.keywords):
            return _FUNCTIONS[node.func.id](*(walk(a) for a in node.args))
        raise _Unreadable(at, what, f"a node of type {type(node).__name__}")

    try:
        return walk(ast.parse(text, mode="eval"))
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError):
        raise _Unreadable(at, what, "text that does not parse as one") from None
