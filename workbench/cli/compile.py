"""`workbench compile`: CUDA without a GPU. Each schedule of a program is lowered for its ranks
and written out, its kernels' CUDA sources, its plan (text and JSON) and the options and
commit it was made with, and every kernel is compiled with nvcc when nvcc is present:

    workbench compile studies/adam.py --gpus 4 --out build/adam

OUT/manifest.json says, per schedule, whether the backend generates it (and why not), its
kernels and their cubins; OUT/SCHEDULE/ holds plan.txt, plan.json and NAME.cu (+ NAME.cubin).
A schedule the backend refuses is listed with its reason, as `simulate` shows it.

The folder is what `compile-and-measure` runs (`--plan OUT`): each plan.json loads back into
the plan lowered here (codegen.plan_file, versioned), and OUT/program.json holds the program
as written and its default sizes, which the ranks draw inputs for and check against, so no
rank loads the program file or lowers again.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

from workbench.cli.outputs import check_output_dir, output_lock, progress, status
from workbench.errors import RuntimeFault, WorkbenchError
from workbench.files import write_atomic
from workbench.loader import check_size_names, load, parse_sets
from workbench.options import CodegenOptions
from workbench.provenance import provenance


def compile_all(entries: list[dict], out: Path, quiet: bool = True) -> list[str]:
    """Compile every kernel of the generated schedules with nvcc into NAME.cubin beside its
    source, each distinct kernel once (copied where schedules share it) and through the
    compiled-kernel cache (WB_CACHE_DIR: a kernel compiled before, by this command or a run,
    is not compiled again); the failures. Unless `quiet`, a progress bar on a terminal counts
    the kernels as nvcc finishes them."""
    from codegen.render import include_dir
    from workbench.runtime.compiler import compile_cubin

    first: dict[str, Path] = {}
    for e in entries:
        for k in e.get("kernels", []):
            first.setdefault(k, out / e["folder"] / f"{k}.cu")

    def one(item):
        kernel, src = item
        try:
            cubin = compile_cubin(kernel, src.read_text(), include_dir())
        except RuntimeFault as e:
            return kernel, str(e)
        write_atomic(src.with_suffix(".cubin"), cubin.read_bytes(), out)
        return kernel, ""

    pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
    try:
        done = progress(pool.map(one, first.items()), "compile: nvcc", lambda r: r[0],
                        total=len(first), plain=False, quiet=quiet)
        failed = {k: why for k, why in done if why}
    finally:  # Ctrl-C: the kernels not yet started are not compiled
        pool.shutdown(wait=True, cancel_futures=True)
    for e in entries:
        for k in e.get("kernels", []):
            cubin = out / e["folder"] / f"{k}.cubin"
            if k not in failed and cubin != first[k].with_suffix(".cubin"):
                write_atomic(cubin, first[k].with_suffix(".cubin").read_bytes(), out)
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
@click.option("--schedule", multiple=True, default=("all",), show_default=True,
              callback=lambda ctx, param, v: ",".join(v),
              help="Schedules besides the unscheduled program (comma-separated, or the option "
                   "repeated), or all.")
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
    from codegen.compiled import compile_folder, write_manifest
    from codegen.lower import stage_order
    from workbench.interpreter import bind_sizes
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
    runs_at = []
    if {s.name for s in loaded.program.symbols()} <= sizes.keys():
        # the kernels are size-generic, but a plan shown at sizes that P cannot slice (N = 2^20
        # at P = 3), or whose chunks they leave undivided, would be a plan no run can take:
        # refuse it here, as every run would
        bind_sizes(loaded.program, sizes)
        runs_at = [sizes]
    out = Path(out_dir)
    # The whole run holds --out: two compiles into one folder would mix one program's kernels
    # with the other's plans and manifest
    with output_lock(out, "--out"):
        extra = []
        if autotune:  # the candidates the backend generates, as simulate --autotune ranks them
            from workbench import autotune as tuner
            from workbench.cli.simulate import generated_candidates

            with status("compile: the autotuner searches", quiet):
                found = tuner.search(loaded.program).candidates
            extra = generated_candidates(found, P, options, "compile")
        manifest = compile_folder(
            out, loaded, program_file, gpus, P, options, sizes, schedule, False,
            provenance(options), extra,
            lambda todo: progress(todo, "compile: lowering", lambda item: item[0], plain=False,
                                  quiet=quiet), runs_at)
        entries = manifest["schedules"]
        nvcc = None if no_nvcc else find_nvcc()
        failed = compile_all(entries, out, quiet) if nvcc else []
        write_manifest(out, {**manifest, "nvcc": nvcc or "not run"})
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
