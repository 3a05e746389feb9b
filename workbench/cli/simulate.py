"""`workbench simulate`: predict every schedule of a program on a modelled cluster.

    workbench simulate studies/adam.py --hardware h200x4 --set N=2**26

One row per schedule (the unscheduled program, the file's named schedules, and any extra
candidates such as the autotuner's): simulated time, the cost model's closed form, the speedup
over the unscheduled program, and the bottleneck resource; the best row is marked.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import click
import numpy as np
import sympy

from workbench.cli.outputs import check_output_file
from cost_model.hardware import load_hardware
from cost_model.ops import CostContext, explain_collectives, peak_memory, program_cost
from simulator import Variability
from simulator import simulate as simulate_program
from simulator.mesh import Mesh, MeshError, Phase, simulate_mesh
from workbench import autotune as tuner
from workbench import ir
from workbench.errors import NotOnThisCluster, SizeError, WorkbenchError
from workbench.interpreter import bind_sizes
from workbench.loader import check_size_names, load, parse_sets
from workbench.verify import verify

UNSCHEDULED = "unscheduled"


@dataclass
class Prediction:
    """One schedule's prediction: simulated and closed-form time, and its timeline. A
    schedule that could not be predicted (illegal, or not runnable on this cluster) has NaN
    times and says why in `note`."""

    name: str
    program: ir.Program | None
    time_s: float
    model_s: float
    lower_bound_s: float
    bottleneck: str
    result: object  # simulator.SimResult, None when not predicted
    formula: object = None
    note: str = ""
    # NCCL's pick per collective (cost_model.ops.explain_collectives): for --explain
    collectives: tuple = ()
    # peak memory per rank (cost_model.ops.peak_memory), None when not computed
    memory: object = None
    # the simulated time of each sample (--samples) when ranks differ; time_s is their median
    samples_s: tuple = ()
    # the sizes it was predicted at (the file's, --set, P from the cluster): name -> int
    sizes: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether the schedule was predicted (it applies and runs on this cluster)."""
        return self.result is not None

    @classmethod
    def left_out(cls, name: str, program: ir.Program | None, why: str) -> Prediction:
        """The row of a schedule that was not predicted, and why."""
        nan = float("nan")
        return cls(name, program, nan, nan, nan, "", None, note=why)


NOTE_WIDTH = 72


def printed(df):
    """The table as printed: a long note (why a schedule was left out, already written in full
    to stderr) cut to its opening words, so the rows stay readable; --csv/--json keep it whole."""
    if "note" not in df.columns:
        return df
    cut = df.copy()
    cut["note"] = [n if len(n) <= NOTE_WIDTH else n[:NOTE_WIDTH - 13] + "... (stderr)"
                   for n in cut["note"]]
    return cut


def resolve_sizes(program: ir.Program, defaults: dict, sets: dict, cluster) -> dict:
    """Sizes for a run: the file's `sizes`, then --set, and P from the hardware unless set.

    Every group whose size is the symbol P gets an equal share of the cluster's GPUs (a
    pipeline of two stages of P ranks on 8 GPUs has P = 4)."""
    sizes = {**defaults, **sets}
    p_groups = [g for g in program.groups() if str(g.size) == "P"]
    world = cluster.world_size
    if "P" not in sets and p_groups:
        if world % len(p_groups):
            raise SizeError(f"group size P must split the {world} GPUs of {cluster.name} into "
                            f"{len(p_groups)} equal groups, got {world} GPUs; pass --set P=... "
                            "or another --nodes")
        sizes["P"] = world // len(p_groups)
    if p_groups and sizes["P"] * len(p_groups) > world:
        raise SizeError(f"group size P must fit the cluster: {len(p_groups)} group(s) of P ranks "
                        f"on {world} GPUs of {cluster.name}, got P={sizes['P']}; lower P or "
                        "add --nodes")
    return sizes


def candidates(loaded, autotune: Iterable[tuple[str, ir.Program]] | None = None):
    """(name, program or the error) for the unscheduled program, each named schedule, then
    `autotune`'s: a schedule that fails to apply is yielded with its WorkbenchError, so one
    illegal schedule does not stop the others."""
    yield UNSCHEDULED, loaded.program
    for name, sched in loaded.schedules.items():
        try:
            yield name, sched.apply()
        except WorkbenchError as e:
            yield name, e
    if autotune is not None:
        yield from autotune


def predict(loaded, cluster, sets: dict | None = None,
            autotune: Iterable[tuple[str, ir.Program]] | None = None,
            symbolic: bool = False, reduced: bool | None = None, progress: bool = False,
            variability: Variability | None = None, samples: int = 1,
            mesh: Mesh | None = None, axis: str | None = None, stages: str | None = None,
            ) -> list[Prediction]:
    """Simulate every candidate schedule of a loaded program file on `cluster`.

    `autotune` is the hook for extra candidates: any iterable of (name, Program), e.g. the
    autotuner's legal transform sequences applied to the program. With `variability`, each
    schedule is simulated `samples` times (seeds (seed, 0..samples-1)); its time is the
    median and `samples_s` holds them all. With `mesh`, the program runs on every group of
    mesh axis `axis` at once (P is that axis's size), priced as those groups see the cluster
    (simulator.mesh), every rank simulated, sharing the network."""
    if samples < 1:
        raise WorkbenchError(f"--samples must be at least 1, got {samples}; e.g. --samples 20")
    if variability is not None:
        variability.check(cluster.world_size)
    physical = cluster
    if mesh is not None:
        mesh.check(cluster)
        if axis is None:
            raise MeshError(f"--axis must name the mesh axis the program's groups run over, "
                            f"got none for --mesh {mesh}; e.g. --axis {mesh.axes[-1][0]}")
        size = mesh.axis_size(axis)
        if (sets or {}).get("P", size) != size:
            raise MeshError(f"--set P must be the {axis} axis's size {size} with --mesh, got "
                            f"{sets['P']}; drop --set P")
        sets = {**(sets or {}), "P": size}
        cluster = mesh.view(cluster, axis, stages)  # what the program's groups see: prices them
    elif axis is not None or stages is not None:
        option, name = ("--axis", axis) if axis is not None else ("--stages", stages)
        raise MeshError(f"{option} needs --mesh, got {option} {name} alone; add e.g. --mesh "
                        f"tp=8,{name}={max(1, cluster.world_size // 8)}")
    sizes = resolve_sizes(loaded.program, loaded.sizes, sets or {}, cluster)
    items = list(candidates(loaded, autotune))
    out = []
    iterator = items
    if progress and len(items) > 3:
        from rich.console import Console
        from rich.progress import track

        iterator = track(items, description="simulating", console=Console(stderr=True),
                         transient=True)
    link = "nic" if cluster.nodes > 1 and cluster.gpus_per_node * cluster.nic.bandwidth_Bps \
        < cluster.nvlink.bandwidth_Bps else "nvlink"
    for name, program in iterator:
        if isinstance(program, WorkbenchError):
            click.echo(f"schedule {name} is illegal: {program}", err=True)
            out.append(Prediction.left_out(name, None, f"illegal: {program}"))
            continue
        try:
            # what this cluster cannot run is refused by the verifier, saying why and what
            # to use instead (a fused collective kernel over several NVLink domains)
            verify(program, cluster.placement(sizes))
        except NotOnThisCluster as e:
            why = str(e).split("\n\nin program:")[0]
            click.echo(f"schedule {name} left out on {cluster.name}: {why}", err=True)
            out.append(Prediction.left_out(name, program, f"not on {cluster.name}: {why}"))
            continue
        bound = bind_sizes(program, sizes)
        memory = peak_memory(CostContext(program, cluster, bound))
        if not memory.fits:
            # a schedule that does not fit in the GPU's memory cannot run: said, never best
            click.echo(f"schedule {name} left out on {cluster.name}: {memory.why_not()}",
                       err=True)
            left = Prediction.left_out(name, program, f"does not fit: {memory.why_not()}")
            left.memory = memory
            out.append(left)
            continue
        try:
            cost = program_cost(program, cluster, bound)
        except NotOnThisCluster as e:
            # a schedule this cluster cannot run (copy engines across nodes): left out, said
            click.echo(f"schedule {name} left out on {cluster.name}: {e}", err=True)
            out.append(Prediction.left_out(name, program, f"not on {cluster.name}: {e}"))
            continue
        if mesh is not None:
            runs = [simulate_mesh(physical, mesh, [Phase(program, axis, bound, stages)],
                                  record=i == 0 or samples == 1, variability=variability,
                                  sample=i)
                    for i in range(samples if variability is not None else 1)]
        else:
            runs = [simulate_program(program, cluster, bound, reduced=reduced,
                                     variability=variability, sample=i,
                                     record=i == 0 or samples == 1)
                    for i in range(samples if variability is not None else 1)]
        result = runs[0]
        times = tuple(r.time_s for r in runs)
        formula = program_cost(program, cluster, bound, symbolic=True).time_s if symbolic else None
        picks = tuple(explain_collectives(CostContext(program, cluster, bound)))
        out.append(Prediction(name, program, float(np.median(times)), float(cost.time_s),
                              float(cost.lower_bound_s), result.bottleneck(link), result,
                              formula, collectives=picks, memory=memory,
                              samples_s=times if variability is not None else ()))
    for p in out:
        p.sizes = {k: int(v) for k, v in sizes.items()}
    return out


def table(predictions: list[Prediction], memory: bool = False):
    """The pandas table: one row per schedule, the best predicted one marked; a `note`
    column says why a row was not predicted, when one was not. `memory`: add each schedule's
    peak memory per rank (mem_GiB) and the share of the GPU's capacity it takes (mem_use)."""
    import pandas as pd

    predicted = [p for p in predictions if p.ok]
    base = next((p.time_s for p in predicted if p.name == UNSCHEDULED),
                predicted[0].time_s if predicted else float("nan"))
    best = min(predicted, key=lambda p: p.time_s) if predicted else None
    df = pd.DataFrame({
        "schedule": [p.name for p in predictions],
        "time_ms": [p.time_s * 1e3 for p in predictions],
        "model_ms": [p.model_s * 1e3 for p in predictions],
        # a program with nothing to run takes 0 s: no speedup to speak of
        "speedup": [base / p.time_s if p.time_s > 0 else float("nan") for p in predictions],
        "bottleneck": [p.bottleneck for p in predictions],
        "best": ["*" if p is best else "" for p in predictions],
    })
    unscheduled = next((p.program for p in predictions if p.name == UNSCHEDULED), None)
    sliced = [_sliced_outputs(unscheduled, p.program) for p in predictions]
    if any(sliced):  # the program allowed these (may_stay_sliced); say which schedule does it
        df["stays_sliced"] = sliced
    if memory:
        nan = float("nan")
        df["mem_GiB"] = [p.memory.peak_bytes / 2**30 if p.memory else nan for p in predictions]
        df["mem_use"] = [p.memory.peak_bytes / p.memory.capacity_bytes if p.memory else nan
                         for p in predictions]
    if any(p.samples_s for p in predictions):  # ranks differ: the spread over the samples
        nan = float("nan")
        df["p50_ms"] = [np.percentile(p.samples_s, 50) * 1e3 if p.samples_s else nan
                        for p in predictions]
        df["p99_ms"] = [np.percentile(p.samples_s, 99) * 1e3 if p.samples_s else nan
                        for p in predictions]
    if any(p.note for p in predictions):
        df["note"] = [p.note for p in predictions]
    return df


def explanation(predictions: list[Prediction]) -> str:
    """What --explain prints: per predicted schedule, each NCCL collective with its ranks and
    nodes, its buffer, the algorithm and protocol NCCL's choice rule picks, the link that
    bounds it, its time alone, and its algbw and busbw as nccl-tests reports them (algbw =
    buffer / time; busbw = algbw x 2(n-1)/n for AllReduce, (n-1)/n for ReduceScatter and
    AllGather, 1 for Broadcast and Reduce), to set beside an nccl-tests run."""
    from cost_model.collectives import bus_factor

    lines = []
    for p in (p for p in predictions if p.ok):
        lines.append(f"\n{p.name}: NCCL collectives" if p.collectives
                     else f"\n{p.name}: no NCCL collectives")
        for c in p.collectives:
            algbw = c["nbytes"] / c["time_s"] / 1e9 if c["time_s"] > 0 else float("nan")
            busbw = algbw * bus_factor(c["kind"], c["ranks"])
            lines.append(f"  {c['stmt']} = {c['kind']} over {c['ranks']} ranks on "
                         f"{c['nodes']} node(s): {c['algorithm']}/{c['protocol']}, "
                         f"{c['link']}-bound, {c['time_s'] * 1e3:.4g} ms for "
                         f"{_bytes(c['nbytes'])}, algbw {algbw:.4g} GB/s, "
                         f"busbw {busbw:.4g} GB/s")
    return "\n".join(lines)


def _bytes(n: float) -> str:
    """1073741824 -> '1 GiB', 6291456 -> '6 MiB' (binary units, as buffer sizes are)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n:.0f} B"


def sizes_text(sizes: dict) -> str:
    """{'N': 268435456, 'P': 4} -> 'N=268435456 (2^28), P=4': every size a run used, the
    powers of two also as such (what --set takes: --set N=2**28)."""
    def one(v: int) -> str:
        return f"{v} (2^{v.bit_length() - 1})" if v >= 1024 and v & (v - 1) == 0 else str(v)

    return ", ".join(f"{k}={one(v)}" for k, v in sorted(sizes.items(), key=_p_last))


def _p_last(item) -> tuple:
    return (item[0] == "P", item[0])


def _sliced_outputs(unscheduled: ir.Program | None, program: ir.Program | None) -> str:
    """The outputs `program` returns with another storage than the unscheduled program (only
    those the program declared may stay sliced can differ)."""
    if unscheduled is None or program is None:
        return ""
    return ",".join(new.name for old, new in zip(unscheduled.outputs, program.outputs)
                    if old.type.layout != new.type.layout)


def rank_factors(pairs, option: str) -> tuple[tuple[int, float], ...]:
    """Parse RANK=FACTOR pairs of `option` (--slow, --degrade)."""
    out = []
    for pair in pairs:
        rank, eq, factor = pair.partition("=")
        try:
            out.append((int(rank), float(factor)))
        except ValueError:
            eq = ""
        if not eq:
            raise WorkbenchError(f"{option} must be RANK=FACTOR (an integer GPU rank, a number "
                                 f">= 1), got {pair!r}; e.g. {option} 3=1.5")
    return tuple(out)


@click.command()
@click.argument("program_file", metavar="PROGRAM.py[:NAME]")
@click.option("--hardware", default="h200x4", show_default=True,
              help="Preset (h200x4, h100x8, a100x8, v100x16; clusters: dgx-h100, dgx-h200, "
              "dgx-h800, dgx-b200, gb200-nvl72, dgx-a100, aws-p4d, aws-p5, dgx2-v100) or a "
              "profile file (.json/.yaml).")
@click.option("--nodes", type=int, default=1, show_default=True,
              help="Nodes of the preset, linked by a 400 Gb/s NIC per GPU.")
@click.option("--no-nvls", is_flag=True,
              help="NVLink SHARP off (as NCCL_NVLS_ENABLE=0): no NVLS/NVLSTree algorithms.")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE",
              help="Bind a size, e.g. --set N=2**28 (P defaults to the cluster's GPUs).")
@click.option("--symbolic", is_flag=True, help="Also print each schedule's closed-form time.")
@click.option("--full", is_flag=True, help="Simulate every rank (no reduction by symmetry).")
@click.option("--autotune", is_flag=True,
              help="Add the autotuner's candidates (workbench.autotune.search).")
@click.option("--memory", "show_memory", is_flag=True,
              help="Add each schedule's peak memory per rank and its share of the GPU's.")
@click.option("--explain", is_flag=True,
              help="Also print the algorithm and protocol NCCL picks for each collective.")
@click.option("--slow", multiple=True, metavar="RANK=FACTOR",
              help="GPU RANK computes FACTOR (>= 1) times as slowly (repeatable).")
@click.option("--straggler-rate", type=float, default=0.0, show_default=True,
              help="Probability that a GPU is a straggler (drawn with --seed).")
@click.option("--straggler-slowdown", type=float, default=1.5, show_default=True,
              help="How many times as slowly a straggler computes.")
@click.option("--jitter", type=float, default=0.0, show_default=True,
              help="Each kernel, and each step of a collective, takes 1 + |N(0, JITTER)| "
              "times its time.")
@click.option("--degrade", multiple=True, metavar="RANK=FACTOR",
              help="GPU RANK's link (NVLink/NIC) moves data FACTOR (>= 1) times as slowly.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the draws.")
@click.option("--samples", type=int, default=1, show_default=True,
              help="Draws to simulate when ranks differ; adds p50_ms and p99_ms columns.")
@click.option("--mesh", "mesh_text", metavar="AXIS=SIZE,...",
              help="Lay the GPUs out as a device mesh, first axis fastest (tp=8,dp=128: tp "
              "inside a node, dp strided across nodes); with --axis.")
@click.option("--axis", help="The mesh axis the program's process group runs over: every group "
              "of it runs the program at once, sharing the links.")
@click.option("--stages", help="With --mesh: the axis a program's process groups (pipeline "
              "stages) are laid along, e.g. --axis tp --stages pp.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write the table.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the table.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False),
              help="Write the best schedule's simulated timeline as a Chrome/Perfetto trace "
              "(open in ui.perfetto.dev): a process per GPU, a thread per resource.")
@click.option("--trace-all", is_flag=True,
              help="With --trace: every predicted schedule's timeline in the one trace, each "
              "GPU of each a process named '<schedule>: GPU <g>', all starting at t = 0.")
def simulate(program_file, hardware, nodes, no_nvls, sets, symbolic, full, autotune, show_memory,
             explain, slow, straggler_rate, straggler_slowdown, jitter, degrade, seed, samples,
             mesh_text, axis, stages, csv_path, json_path, trace_path, trace_all) -> None:
    """Predict each schedule's time on a modelled cluster (no GPU needed)."""
    for path, option in ((csv_path, "--csv"), (json_path, "--json"), (trace_path, "--trace")):
        check_output_file(path, option)
    if trace_all and not trace_path:
        raise WorkbenchError("--trace-all must come with --trace FILE, got it alone; e.g. "
                             "--trace timeline.json --trace-all")
    size_values = parse_sets(sets)
    cluster = load_hardware(hardware, nodes, nvls=False if no_nvls else None)
    loaded = load(program_file)
    check_size_names(loaded.program, size_values)
    extra = None
    if autotune:
        seen = cluster
        if mesh_text and axis:  # the program's groups are the axis's: search as they see it
            seen = Mesh.parse(mesh_text).view(cluster, axis, stages)
        sizes = resolve_sizes(loaded.program, loaded.sizes, size_values, seen)
        found = tuner.search(loaded.program, placement=seen.placement(sizes)).candidates
        # the search lists the unscheduled program first; predict() already has it
        extra = [(f"auto:{c.name}", c.program) for c in found if c.program != loaded.program]
    variability = Variability(seed, rank_factors(slow, "--slow"),
                              straggler_rate if straggler_slowdown != 1.0 else 0.0,
                              straggler_slowdown, jitter, rank_factors(degrade, "--degrade"))
    variability.check(cluster.world_size)
    if samples != 1 and not variability.active:
        raise WorkbenchError(f"--samples must be 1 when every rank is the same, got {samples}; "
                             "add --slow, --straggler-rate, --jitter or --degrade")
    predictions = predict(loaded, cluster, size_values, extra, symbolic,
                          reduced=False if full or variability.active else None, progress=True,
                          variability=variability if variability.active else None,
                          samples=samples, mesh=Mesh.parse(mesh_text) if mesh_text else None,
                          axis=axis, stages=stages)
    df = table(predictions, memory=show_memory)
    first = next((p for p in predictions if p.ok), None)
    sizes = predictions[0].sizes if predictions else {}
    click.echo(f"{loaded.program.name} on {cluster.name} ({cluster.world_size} GPUs) at "
               f"{sizes_text(sizes)}; "
               f"{first.result.note() if first else 'no schedule predicted (see the notes)'}")
    click.echo(printed(df).to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if symbolic:
        for p in (p for p in predictions if p.ok):
            # 4 significant digits: the constants are fitted, more digits would be noise.
            click.echo(f"\n{p.name}: t(s) = {sympy.N(p.formula, 4)}")
    if explain:
        click.echo(explanation(predictions))
    # the files say what the header says: the cluster and the sizes of every row
    if csv_path:
        df.assign(hardware=cluster.name,
                  sizes=" ".join(f"{k}={v}" for k, v in sorted(sizes.items(), key=_p_last))
                  ).to_csv(csv_path, index=False)
    if json_path:
        rows = json.loads(df.to_json(orient="records"))
        Path(json_path).write_text(json.dumps([{**r, "hardware": cluster.name, "sizes": sizes}
                                               for r in rows], indent=2))
    if trace_path:
        predicted = [p for p in predictions if p.ok]
        if not predicted:
            raise WorkbenchError(f"--trace needs a predicted schedule, got none of "
                                 f"{len(predictions)} (see the note column)")
        from simulator.trace import chrome_trace

        best = min(predicted, key=lambda p: p.time_s)
        runs = [(p.name + " (best)" * (p is best), p.result)
                for p in (predicted if trace_all else [best])]
        Path(trace_path).write_text(json.dumps(chrome_trace(runs)))
