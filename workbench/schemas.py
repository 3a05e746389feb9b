"""Schemas of the data files the workbench reads back, checked by jsonschema (decision 107).

One JSON Schema per format says what a parsed file must hold; `check` validates parsed data
against it and turns the first error into one line: where (the file and record), the field's
path, what it must be (the failing part's `description`), what kind of value it got (its JSON
type, never its text: a file may be a link to a secret), and the fix.

JSON's own "number" and "integer" are narrowed to what a measurement can be: a number is a
finite real (Python's json reads NaN and Infinity), an integer an int (not 2.0, not a bool).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import jsonschema
from jsonschema import Draft202012Validator, validators

from workbench.errors import WorkbenchError


def _finite_number(checker, value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _whole_number(checker, value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_TYPES = Draft202012Validator.TYPE_CHECKER.redefine_many(
    {"number": _finite_number, "integer": _whole_number})
Validator = validators.extend(Draft202012Validator, type_checker=_TYPES)

_JSON_TYPES = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
               (list, "a list"), (Mapping, "a mapping"), (type(None), "null"))


def _kind(value) -> str:
    """What `value` is, by its JSON type, never its content."""
    if isinstance(value, float) and not math.isfinite(value):
        return "a non-finite number"
    return next((name for t, name in _JSON_TYPES if isinstance(value, t)),
                type(value).__name__)


def _field(path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(the whole)"


def _description(schema: dict, schema_path) -> str:
    """The `description` nearest the failing keyword along `schema_path`."""
    found, node = schema.get("description", "valid"), schema
    for part in list(schema_path)[:-1]:
        node = node[part]
        if isinstance(node, dict) and "description" in node:
            found = node["description"]
    return found


# What a number that fails a bound is, said by the bound (the value is file content).
_BEYOND = {"minimum": "< {}", "exclusiveMinimum": "<= {}", "maximum": "> {}",
           "exclusiveMaximum": ">= {}"}


def _got(error) -> str:
    """What `error`'s instance is: its JSON type, and for a number past a bound which side."""
    if error.validator in _BEYOND:
        return f"a number {_BEYOND[error.validator].format(f'{error.validator_value:g}')}"
    if (error.validator == "type" and error.validator_value == "integer"
            and isinstance(error.instance, float) and math.isfinite(error.instance)):
        return "a number that is not whole"
    if error.validator == "not":
        return f"{_kind(error.instance)} in the range it excludes"
    if error.validator == "minItems" and not error.instance:
        return "an empty list"
    if error.validator == "anyOf" and isinstance(error.instance, Mapping):
        return "a mapping that has none of them"
    if error.validator in ("const", "enum"):
        kind = _kind(error.instance)
        return f"another {kind.split(' ', 1)[1]}" if kind.startswith("a") else kind
    return _kind(error.instance)


def _property_description(schema: dict, schema_path: list, name: str) -> str:
    """The `description` of property `name` as the object schema nearest the end of
    `schema_path` declares it (a `required` inside an if/then names a property declared
    beside it)."""
    nodes, node = [schema], schema
    for part in schema_path:
        node = node[part]
        nodes.append(node)
    for node in reversed(nodes):
        if isinstance(node, dict) and name in node.get("properties", {}):
            return node["properties"][name].get("description", "valid")
    return "given"


def problem(data, schema: dict) -> str | None:
    """The first way `data` breaks `schema`, as "field X must be Y, got a Z", or None."""
    error = jsonschema.exceptions.best_match(Validator(schema).iter_errors(data))
    if error is None:
        return None
    # an alternative about a record as a whole ("at least one of a or b") is said as itself,
    # not as the failure of one of its branches deeper in the record
    while (error.parent is not None and "description" in error.parent.schema
           and len(error.absolute_path) > len(error.parent.absolute_path)):
        error = error.parent
    if error.validator == "required":
        missing = next(n for n in error.validator_value if n not in error.instance)
        what = _property_description(schema, list(error.absolute_schema_path)[:-1], missing)
        return f"field {_field([*error.absolute_path, missing])} must be {what}, got nothing"
    if error.validator == "additionalProperties" and error.validator_value is False:
        known = error.schema.get("properties", {})
        extra = next(str(k) for k in error.instance if k not in known)
        return (f"field {_field([*error.absolute_path, extra])} must be one of the known fields "
                f"({', '.join(known)}), got an unknown field")
    what = _description(schema, error.absolute_schema_path)
    if "propertyNames" in error.absolute_schema_path:  # a key: name it in the field's path
        return (f"field {_field([*error.absolute_path, str(error.instance)])} must be named "
                f"{what}, got another name")
    if not error.absolute_path:  # the file as a whole: no field to name
        return f"must be {what}, got {_got(error)}"
    return f"field {_field(error.absolute_path)} must be {what}, got {_got(error)}"


def check(data, schema: dict, where: str, fix: str,
          error: type[WorkbenchError] = WorkbenchError) -> None:
    """Raise `error` ("<where> <field> must be <what>, got <kind>; <fix>") unless `data`
    matches `schema`."""
    found = problem(data, schema)
    if found is not None:
        raise error(f"{where} {found}; {fix}")


def number(description: str, **bounds) -> dict:
    """A finite number's schema with its `description` and JSON Schema bounds."""
    return {"type": "number", "description": description, **bounds}


def integer(description: str, **bounds) -> dict:
    """An integer's (not a bool's) schema with its `description` and bounds."""
    return {"type": "integer", "description": description, **bounds}


def rows(description: str, row: dict, **more) -> dict:
    """A list of records, each matching `row`."""
    return {"type": "array", "description": description, "items": row, **more}


NAME = {"type": "string", "description": "a string"}
SIZES = {"type": "object", "description": "a mapping of size names to positive integers",
         "additionalProperties": {"type": "integer", "minimum": 1,
                                  "description": "a positive integer"}}
TIME_MS = number("a finite number >= 0", minimum=0)
TIME_MS_OR_NULL = {"description": "a finite number >= 0 or null",
                   "anyOf": [TIME_MS, {"type": "null"}]}

# A record of compile-and-measure's JSON (workbench.runtime.worker) as `sweep measured` and
# `compare` read it: median_ms may be null (a schedule that was not measured), and then the
# spread need not be there.
MEASURE_RECORD = {
    "type": "object", "description": "a mapping of fields",
    "required": ["spec", "program", "schedule", "kind", "P"],
    "properties": {
        "spec": NAME, "program": NAME, "schedule": NAME, "kind": NAME, "check": NAME,
        "sizes": SIZES,
        "P": {"type": "integer", "minimum": 1, "description": "a positive integer"},
        "median_ms": TIME_MS_OR_NULL, "min_ms": TIME_MS_OR_NULL,
        "p10_ms": TIME_MS_OR_NULL, "p90_ms": TIME_MS_OR_NULL,
        "max_error": TIME_MS_OR_NULL, "comm_bytes": TIME_MS_OR_NULL,
        "reps": {"description": "an integer or null",
                 "anyOf": [{"type": "integer"}, {"type": "null"}]},
    },
    # a timed record carries its spread
    "if": {"properties": {"median_ms": {"type": "number"}}, "required": ["median_ms"]},
    "then": {"required": ["p10_ms", "p90_ms"],
             "properties": {"p10_ms": TIME_MS, "p90_ms": TIME_MS}},
}

# A record's per-step times and the program it measured, as `sweep steps` reads them.
STEP_RECORD = {
    "type": "object", "description": "a mapping of fields",
    "required": ["spec", "schedule", "sizes", "steps"],
    "properties": {
        "spec": {"type": "string", "pattern": r"\S",
                 "description": "the name of the program file measured"},
        "program_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$",
                           "description": "64 hex digits (the program's sha256)"},
        "schedule": {"type": "string", "description": "a schedule name"},
        "sizes": SIZES | {"minProperties": 1},
        "steps": {"type": "array", "description": "a list of steps", "items": {
            "type": "object", "description": "a mapping (stage, stmts, median_ms)",
            "required": ["stage", "stmts", "median_ms"],
            "properties": {
                "stage": {"type": "integer", "minimum": 0, "description": "an integer >= 0"},
                "stmts": {"type": "string", "description": "the statement names as text"},
                "median_ms": number("a finite time >= 0 in ms", minimum=0),
            }}},
    },
}

# compile-and-measure's JSON as a whole (NAME.json, NAME.partial.json): its records are
# checked one by one by the reader that uses them (a steps record need not be timed).
RESULTS_JSON = {
    "type": "object", "description": "compile-and-measure's JSON (an object with 'records')",
    "required": ["records"],
    "properties": {"records": {"type": "array", "description": "a list of records"}},
}

# benchmarks/gpu/link_probe_peers.py's JSON, as --link-rate reads it.
LINK_PROBE = {
    "type": "object", "description": "a link probe's JSON object",
    "required": ["P", "practical_GBps", "practical_by"],
    "properties": {
        "P": {"type": "integer", "minimum": 1, "description": "the GPU count, a positive integer"},
        "practical_GBps": number("a finite rate in GB/s > 0", exclusiveMinimum=0),
        "practical_by": {"type": "string", "description": "the mechanism's name"},
    },
}
