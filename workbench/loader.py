"""Loading a program file: a Python file that builds a Program with the DSL.

Convention: the file binds its program to the name `program` (or the user names another with
`FILE.py:NAME`); schedules are functions decorated with `@schedule(program)` in the same file;
an optional dict `sizes` gives default values for size symbols (`--set` overrides them).
"""

from __future__ import annotations

import runpy
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from workbench import ir
from workbench.errors import ProgramFileError, WorkbenchError


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


def load(spec: str) -> ProgramFile:
    """Run a program file and return what it defines; errors name the file and the fix."""
    path, attr = split_spec(spec)
    if not path.is_file():
        raise ProgramFileError(
            f"program file must exist, got no file at {path}; check the path "
            "(the shipped studies are studies/sgd.py, adam.py, lamb.py, model_parallel.py, "
            "pipeline.py)")
    try:
        namespace = runpy.run_path(str(path), run_name=f"workbench_program_{path.stem}")
    except WorkbenchError as e:
        raise type(e)(f"in program file {path}: {e}") from None
    except SystemExit as e:
        raise ProgramFileError(f"program file {path} must not exit, got exit({e.code})") from None
    except BaseException as e:  # a user's file may raise anything; report where and what
        frames = [f for f in traceback.extract_tb(sys.exc_info()[2])
                  if Path(f.filename).resolve() == path.resolve()]
        where = f"{path}:{frames[-1].lineno}" if frames else str(path)
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
    from workbench.scheduling import Schedule

    schedules = {}
    for v in namespace.values():  # schedules at module level, or in lists/dicts of them
        items = v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else [v]
        for item in items:
            if isinstance(item, Schedule) and item.program == program:
                schedules[item.name] = item
    sizes = namespace.get("sizes", {})
    if not isinstance(sizes, dict):
        raise ProgramFileError(f"`sizes` in {path} must be a dict like {{'N': 2**28}}, got "
                               f"{type(sizes).__name__}")
    return ProgramFile(path, attr, program, schedules, dict(sizes))


def parse_sets(items: tuple[str, ...]) -> dict[str, int]:
    """['N=2**28', 'P=4'] -> {'N': 268435456, 'P': 4}; values are integer expressions."""
    import sympy

    out = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip().isidentifier():
            raise WorkbenchError(f"--set must look like NAME=VALUE, got {item!r}")
        try:
            value = sympy.sympify(text, rational=True)
        except (sympy.SympifyError, SyntaxError, TypeError):
            value = None
        if value is None or not value.is_Integer or value <= 0:
            raise WorkbenchError(f"--set {name.strip()} must be a positive integer expression "
                                 f"such as 2**28, got {text!r}")
        out[name.strip()] = int(value)
    return out
