"""The workbench from Python (a notebook, a script): the commands' work as functions whose
results are pandas DataFrames, the same tables the commands print.

    from workbench.cli import api
    api.simulate("studies/adam.py", "h200x4", {"N": 2**26})          # one row per schedule
    api.compile("studies/adam.py", gpus=4)                          # lowered: kernels, refusals
    api.interpret("studies/adam.py", {"N": 1024, "P": 4})           # outputs on random inputs
    api.results("records/h200x4/predicted.csv")             # a results table

`program` is a program file ("studies/adam.py", "studies/adam.py:mixed"), a loaded one
(`api.load`), or a Program built in the notebook (`from workbench import *`) with the
`schedules` made there by `@schedule(program)`. `sizes` maps each size to an int, keyed by
its name or by a sympy Symbol of that name (`sympy.Symbol("N")`); the file's `sizes` are the
defaults, and P is the cluster's GPU count unless given. The lower-level doors stay public:
`simulator.simulate(program, cost_model.load_hardware("h200x4"), {N: 2**26, P: 4})` returns
the timeline (`SimResult`), `codegen.lower(program, P)` the plan,
`workbench.interpreter.run(program, inputs, sizes)` the outputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from workbench import ir
from workbench.errors import WorkbenchError
from workbench.loader import ProgramFile, check_size_names
from workbench.loader import load as load_file
from workbench.scheduling import Schedule

UNSCHEDULED = "unscheduled"


def load(spec: str) -> ProgramFile:
    """A program file ("FILE.py" or "FILE.py:NAME") loaded: its program, named schedules and
    default sizes. The file runs (as `workbench` commands run it): load files you trust."""
    return load_file(spec)


def program_file(program, schedules: Iterable[Schedule] = ()) -> ProgramFile:
    """`program` as a ProgramFile: a spec is loaded, a ProgramFile kept, a Program (the
    DSL's) wrapped with `schedules` (each made by `@schedule(program)`)."""
    if isinstance(program, ProgramFile):
        return program
    if isinstance(program, (str, Path)):
        return load_file(str(program))
    if isinstance(program, ir.Program):
        named = {s.name: s for s in schedules}
        strangers = [s.name for s in named.values() if s.program is not program]
        if strangers:
            raise WorkbenchError(f"schedules must be made for this program "
                                 f"(@schedule(program)), got {', '.join(strangers)} made for "
                                 "another; pass that program's schedules only")
        return ProgramFile(Path(f"<{program.name}>"), "program", program, named, {})
    raise WorkbenchError(f"program must be a program file path, a loaded ProgramFile or a "
                         f"Program, got {type(program).__name__}; e.g. 'studies/adam.py'")


def size_names(sizes: Mapping | None) -> dict[str, int]:
    """`sizes` keyed by name: a key may be a name or a sympy Symbol (whose name is used)."""
    return {getattr(k, "name", str(k)): int(v) for k, v in (sizes or {}).items()}


def simulate(program, hardware: str = "h200x4", sizes: Mapping | None = None, nodes: int = 1,
             autotune: bool = False, full: bool = False,
             schedules: Iterable[Schedule] = ()):
    """`workbench simulate` as a DataFrame: one row per schedule (the unscheduled program,
    the named schedules, with `autotune` the autotuner's candidates the backend generates):
    `time_ms` simulated, `model_ms` the cost model's, `speedup` over the unscheduled,
    `bottleneck`, `best` ("*"), and `note` where a schedule is not generated or not run.
    `hardware`: a preset name or a profile file; `full`: every rank simulated."""
    from cost_model.hardware import load_hardware
    from workbench import autotune as tuner
    from workbench.cli.simulate import generated_candidates, predict, resolve_sizes, table

    loaded = program_file(program, schedules)
    sets = size_names(sizes)
    check_size_names(loaded.program, sets)
    cluster = load_hardware(hardware, nodes)
    extra = None
    if autotune:
        resolved = resolve_sizes(loaded.program, loaded.sizes, sets, cluster)
        found = tuner.search(loaded.program, placement=cluster.placement(resolved)).candidates
        extra = generated_candidates(found, resolved["P"])
    return table(predict(loaded, cluster, sets, extra, reduced=False if full else None))


def compile(program, gpus: int, sizes: Mapping | None = None, out: str | Path | None = None,
            schedule: str = "all", schedules: Iterable[Schedule] = ()):
    """`workbench compile` as a DataFrame: per schedule its `status` ("generated", "not
    generated", "illegal"), its `kernels` (generated kernel names) and the `reason` it is
    not generated. With `out`, the folder is written as the command writes it (plans,
    sources, manifest; no nvcc: `workbench compile` runs it), which `compile-and-measure
    --plan` runs. `gpus`: all the GPUs (split into the program's pipeline stages)."""
    import pandas as pd

    from codegen import compiled
    from codegen.lower import lower, stage_order
    from workbench.options import CodegenOptions
    from workbench.runtime.worker import stage_split

    loaded = program_file(program, schedules)
    sets = size_names(sizes)
    check_size_names(loaded.program, sets)
    options = CodegenOptions()
    if gpus < 1:
        raise WorkbenchError(f"gpus must be at least 1, got {gpus}")
    P = stage_split(gpus, len(stage_order(loaded.program)), str(loaded.path))
    if out is not None:
        from workbench.cli.outputs import check_output_dir, output_lock
        from workbench.provenance import provenance

        if not loaded.path.is_file():
            raise WorkbenchError(f"compile(..., out=...) must be given a program file (its "
                                 f"folder records the file's sha256), got the program "
                                 f"{loaded.program.name} built in Python; save it to a file "
                                 "or leave out `out`")
        check_output_dir(str(out), "out")
        with output_lock(Path(out), "out"):
            manifest = compiled.compile_folder(
                Path(out), loaded, f"{loaded.path}:{loaded.attr}", gpus, P, options,
                {**loaded.sizes, **sets, "P": P}, schedule, provenance=provenance(options))
            compiled.write_manifest(Path(out), {**manifest, "nvcc": "not run"})
        entries = manifest["schedules"]
    else:
        entries = []
        for name, prog in compiled.schedules(loaded, schedule):
            if isinstance(prog, WorkbenchError):
                entries.append({"schedule": name, "status": "illegal",
                                "reason": str(prog).split("\n\nin program:")[0]})
                continue
            try:
                plan = lower(prog, P, options)
            except WorkbenchError as e:
                entries.append({"schedule": name, "status": "not generated", "reason": str(e)})
                continue
            entries.append({"schedule": name, "status": "generated",
                            "kernels": [k.name for k in plan.kernels()]})
    return pd.DataFrame({
        "schedule": [e["schedule"] for e in entries],
        "status": [e["status"] for e in entries],
        "kernels": [len(e.get("kernels", [])) for e in entries],
        "kernel_names": [", ".join(e.get("kernels", [])) for e in entries],
        "reason": [e.get("reason", "") for e in entries],
    })


def interpret(program, sizes: Mapping, seed: int = 0, schedule: str | None = None,
              schedules: Iterable[Schedule] = ()) -> dict:
    """The program's (or schedule `schedule`'s) outputs in the reference interpreter on
    random inputs (workbench.interpreter.random_inputs, `seed`), sizes given whole (P
    included): {output name: numpy array, with every rank's copy for a Local one}."""
    from workbench.interpreter import random_inputs, run

    loaded = program_file(program, schedules)
    named = {**loaded.sizes, **size_names(sizes)}
    prog = loaded.program
    if schedule not in (None, UNSCHEDULED):
        if schedule not in loaded.schedules:
            raise WorkbenchError(f"schedule must name a schedule of {loaded.program.name}, "
                                 f"got {schedule!r}; one of {sorted(loaded.schedules)}, or "
                                 "None for the unscheduled program")
        prog = loaded.schedules[schedule].apply()
    return run(prog, random_inputs(loaded.program, named, seed), named)


def results(path: str | Path, value: str | None = None):
    """A results table (`workbench sweep`'s predicted.csv, measured.csv, steps.csv) as a
    DataFrame, read as `workbench report` reads it: a regular UTF-8 file of bounded size,
    written whole, and with `value` (e.g. "predicted_s") a number in every row that has one."""
    from workbench.cli.results_files import read_results_csv

    return read_results_csv(Path(path), [value] if value else [], value)
