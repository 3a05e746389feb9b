"""Loading a program file: a Python file that builds a Program with the DSL.

Convention: the file binds its program to the name `program` (or the user names another with
`FILE.py:NAME`); schedules are functions decorated with `@schedule(program)` in the same file;
an optional dict `sizes` gives default values for size symbols (`--set` overrides them).
"""

from __future__ import annotations

import ast
import hashlib
import operator
import runpy
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from workbench import interrupts, ir
from workbench.errors import ProgramFileError, WorkbenchError
from workbench.scheduling import HardExit, Schedule, collecting, no_hard_exit


@dataclass(frozen=True)
class ProgramFile:
    """What a program file defines: its program, named schedules and default sizes."""

    path: Path
    attr: str
    program: ir.Program
    schedules: dict = field(default_factory=dict)  # name -> workbench.scheduling.Schedule
    sizes: dict = field(default_factory=dict)


def split_spec(spec: str) -> tuple[Path, str]:
    """'studies/adam.py:mixed' -> (Path('studies/adam.py'), 'mixed'); default attr 'program'."""
    path, sep, attr = spec.rpartition(":")
    if not sep or not attr.isidentifier():
        return Path(spec), "program"
    return Path(path), attr


def shipped_study(path: Path) -> Path:
    """`path` itself, or, when no such file exists and it names a shipped study
    (`studies/adam.py`), that study's file in the installed `studies` package: so the README's
    commands run from any folder, with a wheel as with a checkout."""
    if path.is_file() or path.parent.name != "studies" or len(path.parts) != 2:
        return path
    from importlib.resources import files  # resources of the package, no import of a study

    installed = Path(str(files("studies") / path.name))
    return installed if installed.is_file() else path


def load(spec: str) -> ProgramFile:
    """Run a program file and return what it defines; errors name the file and the fix."""
    path, attr = split_spec(spec)
    path = shipped_study(path)
    if not path.is_file():
        raise ProgramFileError(
            f"program file must exist, got no file at {path}; check the path "
            "(the shipped studies are studies/sgd.py, adam.py, lamb.py, model_parallel.py, "
            "pipeline.py)")
    try:
        with collecting() as made, no_hard_exit():
            namespace = runpy.run_path(str(path), run_name=f"workbench_program_{path.stem}")
    except WorkbenchError as e:
        raise type(e)(f"in program file {path}: {e}") from None
    except SystemExit as e:
        what = e.code if isinstance(e, HardExit) else f"exit({e.code})"
        raise ProgramFileError(f"program file {path} must not exit, got {what}; remove the "
                               "exit (a program file is run to read its program)") from None
    except BaseException as e:  # a user's file may raise anything; report where and what
        if interrupts.received():
            raise  # the user's Ctrl-C or SIGTERM while the file ran: theirs, not the file's
        frames = [f for f in traceback.extract_tb(sys.exc_info()[2])
                  if Path(f.filename).resolve() == path.resolve()]
        where = f"{path}:{frames[-1].lineno}" if frames else str(path)
        if isinstance(e, RecursionError):
            raise ProgramFileError(
                f"an expression in program file {path} must nest at most a few hundred "
                f"operations deep, got one deeper at {where} (RecursionError); make parts of "
                "it statements of their own (a chain of statements may be as long as you "
                "like)") from None
        raise ProgramFileError(
            f"program file must run without errors, got {type(e).__name__}: {e} at {where}; "
            "fix the file (run it with python to see the whole traceback)") from None
    program = namespace.get(attr)
    if not isinstance(program, ir.Program):
        found = sorted(k for k, v in namespace.items() if isinstance(v, ir.Program))
        hint = (f"; programs it defines: {', '.join(found)} (select one with {path}:NAME)"
                if found else "; end it with `program = Program(inputs=[...], outputs=[...])`")
        raise ProgramFileError(
            f"program file {path} must bind a Program to `{attr}`, got "
            f"{type(program).__name__ if program is not None else 'nothing'}{hint}")
    schedules = _schedules_of(program, namespace, made)
    sizes = namespace.get("sizes", {})
    bad = (not isinstance(sizes, dict)) or next(
        (f"{k!r}: {v!r}" for k, v in sizes.items()
         if not (isinstance(k, str) and k.isidentifier() and type(v) is int and v > 0)), None)
    if bad:
        got = type(sizes).__name__ if not isinstance(sizes, dict) else f"the entry {bad}"
        raise ProgramFileError(f"`sizes` in {path} must be a dict of size names to positive "
                               f"ints like {{'N': 2**28}}, got {got}")
    # One `sizes` serves every program of the file (studies/elementwise_ops.py holds [N]
    # and [T, H] programs): a name must be a size of one of them, never a typo
    known = {"P"} | {s.name for v in namespace.values() if isinstance(v, ir.Program)
                     for s in v.symbols()}
    unknown = sorted(set(sizes) - known)
    if unknown:
        raise ProgramFileError(f"`sizes` in {path} must name sizes of its programs, got "
                               f"{', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return ProgramFile(path, attr, program, schedules, dict(sizes))


def file_digest(spec: str) -> str:
    """The sha256 of the program file `spec` names (FILE.py[:NAME]): what a results file
    records of the program it measured, so that reading the results back never has to run a
    file the results name (a program file is Python: loading it runs it)."""
    path, _ = split_spec(spec)
    return hashlib.sha256(shipped_study(path).read_bytes()).hexdigest()


# The operators a size expression may use: integer arithmetic only (true division would
# turn 2**28/3 into a float, so it is not among them).
_SIZE_OPERATORS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.Mod: operator.mod,
}
# 2**4096 is far beyond any tensor; the cap keeps `9**9**9` from hanging the parser.
_MAX_SIZE_BITS = 4096
SET_MAX = 2**62  # the largest value --set gives a size
MAX_SIZE_TEXT = 200


def _schedules_of(program: ir.Program, namespace: dict, made: list) -> dict:
    """The program's schedules by name: those bound at module level (or in lists and dicts
    there; a later binding of a name wins), then those the file made and did not bind (a
    builder function's), under names not taken."""
    found: dict[str, Schedule] = {}
    for v in namespace.values():
        items = v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else [v]
        for item in items:
            if isinstance(item, Schedule) and item.program == program:
                _unique(found, item)
                found[item.name] = item
    for sched in made:
        if sched.program == program:
            _unique(found, sched)
            found.setdefault(sched.name, sched)
    return found


def _unique(found: dict, sched: Schedule) -> None:
    """Two different schedule functions under one name: one would be dropped without a word.
    (A builder that makes one schedule twice, from the same code, is one schedule.)"""
    other = found.get(sched.name)
    if other is not None and getattr(other.fn, "__code__", None) is not getattr(
            sched.fn, "__code__", None):
        raise ProgramFileError(f"schedule names must be unique, got {sched.name!r} for "
                               f"{other.where()} and {sched.where()}; rename one (@schedule("
                               "program, name=...))")


def parse_size(text: str) -> int:
    """An integer size expression such as 2**28 or 3*2**20 -> int.

    The text is parsed (Python's own `ast`), never evaluated: integer literals, + - * // % **
    and parentheses only, so `__import__('os')` or `[4]` are refused with a message, not run.
    """
    if len(text) > MAX_SIZE_TEXT:  # a size is a short formula; 20,000 terms overflowed ast
        raise ValueError(f"longer than {MAX_SIZE_TEXT} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
        return _size_value(tree.body)
    except SyntaxError:
        raise ValueError("not an expression") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _size_value(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _size_value(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _SIZE_OPERATORS:
        left, right = _size_value(node.left), _size_value(node.right)
        if isinstance(node.op, ast.Pow) and (
                right < 0 or right * max(1, abs(left).bit_length()) > _MAX_SIZE_BITS):
            raise ValueError("a power too large or negative")
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            raise ValueError("a division by zero")
        return _SIZE_OPERATORS[type(node.op)](left, right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        raise ValueError("/ is true division; use //")
    raise ValueError(f"{type(node).__name__.lower()} is not integer arithmetic")


def parse_sets(items: tuple[str, ...]) -> dict[str, int]:
    """['N=2**28', 'P=4'] -> {'N': 268435456, 'P': 4}; values are integer expressions."""
    out = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise WorkbenchError(f"--set must look like NAME=VALUE, e.g. --set N=2**28, got "
                                 f"{item!r}")
        try:
            value = parse_size(text)
        except ValueError as e:
            shown = repr(text[:60]) + ("..." if len(text) > 60 else "")
            raise WorkbenchError(f"--set {name} must be a positive integer expression such as "
                                 f"2**28 (integers with + - * // % ** only), got {shown} "
                                 f"({e})") from None
        if value <= 0:
            raise WorkbenchError(f"--set {name} must be a positive integer, got {text!r} = "
                                 f"{value}")
        if value > SET_MAX:  # a count of elements or ranks past 2**62 is no run's (issue 40)
            raise WorkbenchError(f"--set {name} must be at most 2**62, got {text.strip()[:60]!r}"
                                 f" = 2**{value.bit_length() - 1} or more; pass a size a GPU "
                                 "can hold, e.g. --set N=2**28")
        if name in out:  # the last one was kept without a word
            raise WorkbenchError(f"--set {name} must be given once, got {out[name]} and {value}"
                                 "; pass one value (compile-and-measure measures each of "
                                 "repeated values)")
        out[name] = value
    return out


def check_size_names(program: ir.Program, names, where: str = "--set") -> None:
    """Every name given a value must be a size of the program (or P, the group size):
    a misspelt `--set n=2**20` is an error listing the known sizes, never ignored."""
    known = {s.name for s in program.symbols()} | {"P"}
    unknown = sorted(set(names) - known)
    if unknown:
        raise WorkbenchError(f"{where} must name sizes of program {program.name}, got "
                             f"{', '.join(unknown)}; known: {', '.join(sorted(known))}")
