"""A compiled folder: what `workbench compile` writes and `compile-and-measure` runs.

    OUT/manifest.json        per schedule: generated (its folder, kernels) or why not
    OUT/program.json         the program as written and its file's default sizes
    OUT/SCHEDULE/plan.json   the plan lowered for it (codegen.plan_file: loads back as is)
    OUT/SCHEDULE/plan.txt    the plan as text, NAME.cu each kernel's source (+ NAME.cubin)

A schedule is lowered once, here; the ranks of `compile-and-measure` load its plan.json and
run it, and draw inputs for and check against program.json's program, so none of them loads
the program file or lowers again (issue 38).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from codegen.plan import Plan
from codegen.plan_file import (
    PLAN_FORMAT_VERSION,
    PlanFileError,
    load_plan,
    load_program,
    plan_json,
    program_json,
)
from workbench import ir
from workbench.errors import WorkbenchError
from workbench.files import check_target, read_bounded, write_atomic
from workbench.options import CodegenOptions
from workbench.schemas import check, integer, rows

MANIFEST, PROGRAM_FILE, PLAN_FILE = "manifest.json", "program.json", "plan.json"
UNSCHEDULED = "unscheduled"


def folder_name(schedule: str) -> str:
    """A schedule's folder: its name with what a path should not hold replaced
    (auto:split+fuse#2 -> auto_split+fuse_2), never a leading dot ('..' would leave --out;
    @schedule refuses such names already, this holds for any name)."""
    name = re.sub(r"[^A-Za-z0-9_.+-]", "_", schedule)
    return "_" + name[1:] if name.startswith(".") else name


def schedules(loaded, wanted: str | list[str], autotune: bool = False) -> list[tuple[str, object]]:
    """(name, program or the WorkbenchError that made it illegal) of the unscheduled program,
    the named schedules `wanted` picks ("all" or comma-separated names, or a list of them), and
    with `autotune` the autotuner's candidates."""
    if isinstance(wanted, str):
        wanted = wanted.split(",")
    names = [w.strip() for w in wanted if w.strip()] or ["all"]
    known = {UNSCHEDULED, *loaded.schedules}
    unknown = [n for n in names if n != "all" and n not in known]
    if unknown:
        raise WorkbenchError(f"--schedule must name a schedule of {loaded.path}, got "
                             f"{', '.join(map(repr, unknown))}; known: "
                             f"{', '.join(sorted(known))}")
    out: list[tuple[str, object]] = [(UNSCHEDULED, loaded.program)]
    for name, sched in loaded.schedules.items():
        if "all" in names or name in names:
            try:
                out.append((name, sched.apply()))
            except WorkbenchError as e:
                out.append((name, e))
    if autotune:
        from workbench import autotune as tuner

        found = tuner.search(loaded.program).candidates
        out += [(f"auto:{c.name}", c.program) for c in found if c.program != loaded.program]
    return out


def refuse_sizes(plans: Iterable[tuple[str, Plan]], sizes: dict) -> None:
    """Raise a SizeError (exit 2) naming the schedule and the sizes when `sizes` (every
    symbol's value and P) leave a chunked step of one of the (name, plan) pairs undivided
    (codegen.plan.size_faults): `check`, `compile` and `compile-and-measure` refuse them
    before anything is written or any rank starts, where a rank would refuse them later."""
    from codegen.plan import size_faults
    from workbench.errors import SizeError
    from workbench.interpreter import bind_sizes

    for name, plan in plans:
        faults = size_faults(plan, bind_sizes(plan.program, sizes))
        if faults:
            shown = ", ".join(f"{k}={v}" for k, v in sorted(sizes.items()))
            more = f" (and {len(faults) - 1} more)" if len(faults) > 1 else ""
            raise SizeError(f"schedule {name} at {shown}: {faults[0]}{more}")


def lower_entry(name: str, program, P: int, options: CodegenOptions) -> tuple[dict, Plan | None]:
    """Lower one schedule: its manifest entry (status, and the reason where it is not
    generated) and its plan (None where it is not)."""
    from codegen.lower import lower

    entry = {"schedule": name, "folder": folder_name(name)}
    if isinstance(program, WorkbenchError):
        return {**entry, "status": "illegal",
                "reason": str(program).split("\n\nin program:")[0]}, None
    try:
        plan = lower(program, P, options)
    except WorkbenchError as e:  # RuntimeFault: what the backend does not generate
        return {**entry, "status": "not generated", "reason": str(e)}, None
    return {**entry, "status": "generated"}, plan


def write_entry(entry: dict, plan: Plan | None, sizes: dict, out: Path) -> dict:
    """Write a generated schedule's folder (plan.txt, plan.json, its kernels' sources);
    its manifest entry with the kernels named."""
    from codegen.emit import plan_text, sources

    if plan is None:
        return entry
    folder = out / entry["folder"]
    check_target(folder / "plan.txt", out)  # a planted link: refused before mkdir goes through
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "plan.txt", plan_text(plan, sizes), out)
    write_atomic(folder / PLAN_FILE, plan_json(plan), out)
    files = sources(plan)
    for file, text in files.items():
        write_atomic(folder / file, text, out)
    return {**entry, "kernels": [f.removesuffix(".cu") for f in files]}


def compile_folder(out: Path, loaded, spec: str, gpus: int, P: int, options: CodegenOptions,
                   sizes: dict, wanted: str | list[str] = "all", autotune: bool = False,
                   provenance: dict | None = None, extra: list[tuple[str, object]] = (),
                   each: Callable[[list], Iterable] = iter, runs_at: Iterable[dict] = ()) -> dict:
    """Lower every schedule `wanted` picks of a loaded program file for P ranks per stage
    (`gpus` in all) with `options`, and the `extra` (name, program) pairs (the autotuner's
    candidates a caller chose), and write the folder (program.json and each schedule's
    folder); return its manifest, which the caller completes (nvcc) and writes
    (`write_manifest`). `sizes`: shown beside the plans' expressions; `each` wraps the
    schedules as they are lowered (a progress bar). `runs_at`: the sizes (every symbol and P)
    the plans will run at: sizes that a plan's chunks cannot take are refused (SizeError)
    before anything is written."""
    from workbench.loader import file_digest

    todo = [*schedules(loaded, wanted, autotune), *extra]
    made = [lower_entry(n, prog, P, options) for n, prog in each(todo)]
    for at in runs_at:
        refuse_sizes([(e["schedule"], plan) for e, plan in made if plan is not None], at)
    out.mkdir(parents=True, exist_ok=True)
    entries = [write_entry(e, plan, sizes, out) for e, plan in made]
    write_atomic(out / PROGRAM_FILE, program_json(loaded.program, loaded.sizes), out)
    return {"program": loaded.program.name, "spec": spec,
            "program_sha256": file_digest(spec), "gpus": gpus, "P": P, "sizes": sizes,
            "plan_format_version": PLAN_FORMAT_VERSION, **(provenance or {}),
            "schedules": entries}


def write_manifest(out: Path, manifest: dict) -> None:
    write_atomic(out / MANIFEST, json.dumps(manifest, indent=1, default=str), out)


def run_sizes(program: ir.Program, defaults: dict, size_set: dict, P: int) -> dict:
    """The sizes a run takes at one point of a sweep: the program file's defaults, the
    point's values over them, only the program's own symbols, and P the ranks per stage."""
    names = {s.name for s in program.symbols()}
    return {**{k: v for k, v in {**defaults, **size_set}.items() if k in names}, "P": P}


@dataclass(frozen=True)
class Compiled:
    """A compiled folder read back: the program as written, its file's default sizes, the
    program file it came from (spec, sha256: what results name), the GPUs and ranks per stage
    it was lowered for, and per schedule its manifest entry."""

    folder: Path
    program: ir.Program
    defaults: dict
    spec: str
    sha256: str
    gpus: int
    P: int
    entries: tuple[dict, ...]
    options: CodegenOptions = CodegenOptions()  # what every plan of it was lowered with

    def sizes_at(self, size_set: dict) -> dict:
        """The sizes a run of this folder takes at one point of a sweep (run_sizes)."""
        return run_sizes(self.program, self.defaults, size_set, self.P)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(e["schedule"] for e in self.entries)

    def plans(self, wanted: list[str]) -> list[tuple[str, Plan | str]]:
        """(name, its loaded Plan, or why it does not run: "illegal: ..." or "not generated:
        ...") of each schedule `wanted` picks ("all", or names; the unscheduled program
        always), in the folder's order."""
        out = []
        for e in self.entries:
            name = e["schedule"]
            if not ("all" in wanted or name in wanted or name == UNSCHEDULED):
                continue
            if e["status"] == "generated":
                out.append((name, load_plan(self.folder / e["folder"] / PLAN_FILE)))
            else:
                out.append((name, f"{e['status']}: {e['reason']}"))
        return out


# A folder name as folder_name makes it: a plain path component, never a leading dot.
_FOLDER = {"type": "string", "pattern": r"^[A-Za-z0-9_+-][A-Za-z0-9_.+-]{0,199}$",
           "description": "a schedule folder's name (letters, digits, _ . + -; no leading dot)"}
_STATUSES = ("generated", "illegal", "not generated")

# manifest.json as compile-and-measure reads it (what compile_folder and write_manifest write).
MANIFEST_SCHEMA = {
    "type": "object", "description": "workbench compile's manifest (a JSON object)",
    "required": ["spec", "program_sha256", "gpus", "P", "schedules"],
    "properties": {
        "spec": {"type": "string", "description": "the program file's name"},
        "program": {"type": "string", "description": "the program's name"},
        "program_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$",
                           "description": "64 hex digits (the program file's sha256)"},
        "gpus": integer("a positive integer", minimum=1),
        "P": integer("a positive integer", minimum=1),
        "codegen": {"type": "object", "description": "a mapping with the codegen options",
                    "properties": {"options": {
                        "type": "object", "additionalProperties": False,
                        "description": "a mapping of codegen option names to values",
                        "properties": {k: {} for k in CodegenOptions().as_dict()}}}},
        "schedules": rows("a list of schedule entries", {
            "type": "object", "description": "a schedule entry (schedule, folder, status)",
            "required": ["schedule", "folder", "status"],
            "properties": {
                "schedule": {"type": "string", "description": "the schedule's name"},
                "folder": _FOLDER,
                "status": {"enum": list(_STATUSES),
                           "description": f"one of {', '.join(_STATUSES)}"},
                "reason": {"type": "string", "description": "why it was not generated"},
                "kernels": rows("a list of kernel names", {"type": "string",
                                                           "description": "a kernel name"}),
            },
            # a generated schedule lists its kernels, another says why it was not generated
            "allOf": [{"if": {"properties": {"status": {"const": "generated"}}},
                       "then": {"required": ["kernels"]}},
                      {"if": {"properties": {"status": {"enum": list(_STATUSES[1:])}}},
                       "then": {"required": ["reason"]}}],
        }),
    },
}


def read_compiled(folder: str | Path) -> Compiled:
    """The compiled folder at `folder` (`workbench compile --out FOLDER`); refused, naming
    the folder, when it is not one or was written by another plan format version. Its files
    are read as a results folder's are (no link out of it, bounded, MANIFEST_SCHEMA), and
    every generated schedule's plan is loaded here, so a broken folder fails before any GPU
    work, never in a rank."""
    folder = Path(folder)
    fix = f"run workbench compile PROGRAM.py --gpus P --out {folder}"
    path = folder / MANIFEST
    if not path.exists() and not path.is_symlink():
        raise PlanFileError(f"--plan must name a folder written by workbench compile, got "
                            f"{folder} without a readable {MANIFEST} (no such file); {fix}")
    data = read_bounded(path, "--plan's manifest", fix, error=PlanFileError)
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        why = (f"invalid JSON at line {e.lineno} column {e.colno}"
               if isinstance(e, json.JSONDecodeError) else "bytes that are not UTF-8"
               if isinstance(e, UnicodeDecodeError) else "nesting too deep")
        raise PlanFileError(f"--plan's manifest {path} must be JSON, got {why}; {fix}") from None
    version = manifest.get("plan_format_version") if isinstance(manifest, dict) else None
    if version != PLAN_FORMAT_VERSION:
        got = version if isinstance(version, int) else "none" if version is None else "another"
        raise PlanFileError(f"{folder} must hold plans of format version {PLAN_FORMAT_VERSION} "
                            f"(this workbench's), got {got}; compile the program again "
                            "with this workbench (workbench compile)")
    check(manifest, MANIFEST_SCHEMA, f"--plan's manifest {path}", fix, PlanFileError)
    program, defaults = load_program(folder / PROGRAM_FILE)
    try:
        options = CodegenOptions(**manifest.get("codegen", {}).get("options", {}))
    except (TypeError, ValueError, WorkbenchError) as e:
        raise PlanFileError(f"--plan's manifest {path} field codegen.options must be codegen "
                            f"options this workbench takes ({type(e).__name__}); {fix}") from None
    compiled = Compiled(folder, program, defaults, manifest["spec"], manifest["program_sha256"],
                        manifest["gpus"], manifest["P"], tuple(manifest["schedules"]), options)
    compiled.plans(["all"])  # each plan.json loads (PlanFileError naming it), or none runs
    return compiled
