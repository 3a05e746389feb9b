"""`workbench compile`: CUDA without a GPU. Each schedule of a program is lowered for its ranks
and written out, its kernels' CUDA sources, its plan (text and JSON) and the options and
commit it was made with, and every kernel is compiled with nvcc when nvcc is present:

    workbench compile studies/adam.py --gpus 4 --out build/adam

OUT/manifest.json says, per schedule, whether the backend generates it (and why not), its
kernels and their cubins; OUT/SCHEDULE/ holds plan.txt, plan.json and NAME.cu (+ NAME.cubin).
A schedule the backend refuses is listed with its reason, as `simulate` shows it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

from workbench.cli.outputs import check_output_dir, progress, status
from workbench.errors import RuntimeFault, WorkbenchError
from workbench.loader import check_size_names, load, parse_sets
from workbench.options import CodegenOptions
from workbench.provenance import provenance

UNSCHEDULED = "unscheduled"


def folder_name(schedule: str) -> str:
    """A schedule's folder: its name with what a path should not hold replaced
    (auto:split+fuse#2 -> auto_split+fuse_2)."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", schedule)


def schedules(loaded, wanted: str, autotune: bool, quiet: bool = True, P: int = 1,
              options: CodegenOptions | None = None) -> list[tuple[str, object]]:
    """(name, program or the WorkbenchError that made it illegal) of the unscheduled program,
    the named schedules `wanted` picks ("all" or comma-separated names), and with `autotune`
    the autotuner's candidates that the backend generates for groups of P ranks, as
    `simulate --autotune` ranks them (a spinner on a terminal while it searches, unless
    `quiet`; the ones left out counted on stderr)."""
    names = [w.strip() for w in wanted.split(",") if w.strip()] or ["all"]
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
        from workbench.cli.simulate import generated_candidates

        with status("compile: the autotuner searches", quiet):
            found = tuner.search(loaded.program).candidates
        out += generated_candidates(found, P, options, "compile")
    return out


def emit(name: str, program, P: int, options: CodegenOptions, sizes: dict, out: Path) -> dict:
    """Lower one schedule and write its folder; its manifest entry (status, reason, files)."""
    from codegen.emit import plan_record, plan_text, sources
    from codegen.lower import lower

    entry = {"schedule": name, "folder": folder_name(name)}
    if isinstance(program, WorkbenchError):
        return {**entry, "status": "illegal", "reason": str(program).split("\n\nin program:")[0]}
    try:
        plan = lower(program, P, options)
    except WorkbenchError as e:  # RuntimeFault: what the backend does not generate
        return {**entry, "status": "not generated", "reason": str(e)}
    folder = out / entry["folder"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plan.txt").write_text(plan_text(plan, sizes))
    (folder / "plan.json").write_text(json.dumps(plan_record(plan), indent=1))
    files = sources(plan)
    for file, text in files.items():
        (folder / file).write_text(text)
    return {**entry, "status": "generated", "kernels": [f.removesuffix(".cu") for f in files]}


def compile_all(entries: list[dict], out: Path, quiet: bool = True) -> list[str]:
    """Compile every kernel of the generated schedules with nvcc into NAME.cubin beside its
    source, each distinct kernel once (copied where schedules share it); the failures. Unless
    `quiet`, a progress bar on a terminal counts the kernels as nvcc finishes them."""
    from codegen.render import include_dir
    from workbench.runtime.compiler import nvcc_compile

    first: dict[str, Path] = {}
    for e in entries:
        for k in e.get("kernels", []):
            first.setdefault(k, out / e["folder"] / f"{k}.cu")

    def one(item):
        kernel, src = item
        try:
            nvcc_compile(kernel, src, src.with_suffix(".cubin"), include_dir())
        except RuntimeFault as e:
            return kernel, str(e)
        return kernel, ""

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        done = progress(pool.map(one, first.items()), "compile: nvcc", lambda r: r[0],
                        total=len(first), plain=False, quiet=quiet)
        failed = {k: why for k, why in done if why}
    for e in entries:
        for k in e.get("kernels", []):
            cubin = out / e["folder"] / f"{k}.cubin"
            if k not in failed and not cubin.exists():
                shutil.copyfile(first[k].with_suffix(".cubin"), cubin)
        if e.get("kernels"):
            e["cubins"] = [f"{k}.cubin" for k in e["kernels"] if k not in failed]
    return [f"{k}: {why}" for k, why in failed.items()]


def find_nvcc() -> str | None:
    """nvcc's path, or None where the CUDA toolkit is not installed."""
    from workbench.runtime.compiler import nvcc_path

    try:
        return nvcc_path()
    except RuntimeFault:
        return None


@click.command("compile")
@click.argument("program_file", metavar="PROGRAM.py[:NAME]")
@click.option("--gpus", "gpus", type=int, required=True,
              help="Ranks, one per GPU (all stages of a pipeline together), as "
                   "compile-and-measure takes them.")
@click.option("--out", "out_dir", required=True, help="Folder for the sources, plans and cubins.")
@click.option("--schedule", default="all", show_default=True,
              help="Schedules besides the unscheduled program (comma-separated), or all.")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE",
              help="Sizes shown beside the plan's expressions (the kernels are size-generic).")
@click.option("--autotune", is_flag=True, help="Also the autotuner's candidates.")
@click.option("--codegen", "codegen", multiple=True, metavar="NAME=VALUE",
              help="A codegen option (workbench.options), over the environment's WB_* knobs.")
@click.option("--no-nvcc", is_flag=True, help="Write sources and plans only.")
@click.option("--quiet", is_flag=True,
              help="No progress bar on stderr (there is none where stderr is no terminal).")
def compile_program(program_file, gpus, out_dir, schedule, sets, autotune, codegen, no_nvcc,
                    quiet):
    """Write each schedule's CUDA sources and plan, and compile them with nvcc (no GPU needed)."""
    from codegen.lower import stage_order
    from workbench.runtime.worker import stage_split

    if gpus < 1:
        raise WorkbenchError(f"--gpus must be at least 1, got {gpus}")
    check_output_dir(out_dir, "--out")
    options = CodegenOptions.from_env().with_settings(codegen)
    loaded = load(program_file)
    P = stage_split(gpus, len(stage_order(loaded.program)), program_file)
    size_values = parse_sets(sets)
    check_size_names(loaded.program, size_values)
    sizes = {**loaded.sizes, **size_values, "P": P}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    todo = schedules(loaded, schedule, autotune, quiet, P, options)
    entries = [emit(n, prog, P, options, sizes, out)
               for n, prog in progress(todo, "compile: lowering", lambda item: item[0],
                                       plain=False, quiet=quiet)]
    nvcc = None if no_nvcc else find_nvcc()
    failed = compile_all(entries, out, quiet) if nvcc else []
    manifest = {"program": loaded.program.name, "spec": program_file, "gpus": gpus, "P": P,
                "sizes": sizes, **provenance(options), "nvcc": nvcc or "not run",
                "schedules": entries}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str))
    for e in entries:
        what = (f"{len(e['kernels'])} kernel(s)" + (f", {len(e['cubins'])} cubin(s)"
                                                    if "cubins" in e else "")
                if e["status"] == "generated" else f"{e['status']}: {e['reason']}")
        click.echo(f"{e['schedule']}: {what}")
    made = sum(e["status"] == "generated" for e in entries)
    note = ("compiled with " + nvcc if nvcc else
            "not compiled (--no-nvcc)" if no_nvcc else
            "not compiled: nvcc not found on PATH or at /usr/local/cuda/bin/nvcc")
    click.echo(f"wrote {out}: {made} of {len(entries)} schedules generated; {note}")
    if failed:
        raise RuntimeFault(f"every generated kernel must compile with nvcc, got "
                           f"{len(failed)} failure(s), first: {failed[0]}")
