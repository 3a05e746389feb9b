"""`workbench simulate-step`: a training step of the example GPT (examples/train_gpt.py)
predicted for torch (DDP + fused AdamW) and for the workbench's optimizer (each gradient
bucket's AllReduce + Adam as one schedule of studies/adam.py), per phase, on any preset and
number of nodes (design notes 84-85; simulator.training)."""

from __future__ import annotations

import dataclasses
import json
import math

import click

from cost_model import training as ct
from cost_model.hardware import PRESETS, Cluster, load_hardware
from simulator.training import (
    FUSED_MODES,
    Side,
    StepResult,
    program_stages,
    simulate_step,
    workbench_bucket_numels,
)
from workbench.cli.outputs import (
    check_output_files,
    progress,
    say_written,
    status,
    write_csv,
)
from workbench.errors import WorkbenchError
from workbench.files import write_atomic
from workbench.interpreter import bind_sizes
from workbench.loader import load
from workbench.options import CodegenOptions
from workbench.verify import verify

COLUMNS = ("hardware", "nodes", "P", "params", "tokens_per_gpu", "side", "variant", "schedule",
           "forward_ms", "backward_ms", "exposed_comm_ms", "optimizer_ms", "step_ms",
           "backward_phase_ms", "optimizer_phase_ms", "buckets", "x_torch", "host_issue_ms",
           "host_bound")


def gemm_efficiency_for(hardware: str, dtype: str, given: float | None) -> float:
    """The fraction of the GPU's peak_flops a GEMM reaches where the GPU's efficiency table
    has no entries for its dtype (or every GEMM, when given: `step_cluster` then sets the
    table aside): as given; for a preset (a datasheet peak) the calibrated ratio
    (ct.PRESET_GEMM_EFFICIENCY); for a profile 1 (its peak_flops are `workbench calibrate`'s
    measured GEMM rates)."""
    if given is not None:
        if not (0 < given <= 1):
            raise WorkbenchError(f"--gemm-efficiency must be in (0, 1], got {given}; e.g. 0.75")
        return given
    return ct.PRESET_GEMM_EFFICIENCY[dtype] if hardware in PRESETS else 1.0


def candidate_programs(program_file: str, schedule: str):
    """(name, program) of the schedules the workbench may run per bucket: the one named, or
    for 'auto' and 'all' the program as written and every named schedule that a backend generates
    (CoCoNet's ring-fused form is simulated only: left out, as wbtorch leaves it)."""
    loaded = load(program_file)
    if schedule not in ("auto", "all"):
        if schedule == "unscheduled":
            return loaded, [("unscheduled", loaded.program)]
        if schedule not in loaded.schedules:
            have = ", ".join(["auto", "all", "unscheduled", *loaded.schedules])
            raise WorkbenchError(f"--schedule must be one of {have}, got {schedule!r}")
        return loaded, [(schedule, loaded.schedules[schedule].apply())]
    out = [("unscheduled", loaded.program)]
    for name, sched in loaded.schedules.items():
        try:
            program = sched.apply()
        except WorkbenchError:
            continue
        if not any(getattr(s.op, "engine", "") == "ring" for s in program.stmts):
            out.append((name, program))
    return loaded, out


def bucket_stages(program, cluster, P: int, numels, fused: str,
                  options: CodegenOptions = CodegenOptions()) -> dict | None:
    """Per bucket size, the stages of one schedule generated with `options` (None where it
    cannot run a bucket)."""
    stages = {}
    for n in sorted(set(numels)):
        try:
            # what this cluster cannot run (a fused kernel over several NVLink domains) is
            # refused by the verifier, as `simulate` refuses it, before its plan is priced
            verify(program, cluster.placement({"N": n, "P": P}))
            stages[n] = program_stages(program, cluster, bind_sizes(program, {"N": n, "P": P}),
                                       fused, options)
        except WorkbenchError:
            return None
    return stages


def row(hardware: str, nodes: int, shape: ct.GptShape, r: StepResult, torch_s: float) -> dict:
    """One table row: the configuration, the phases in ms and the speedup over torch."""
    ms = 1e3
    return {"hardware": hardware, "nodes": nodes, "P": r.P,
            "params": ct.parameter_count(shape), "tokens_per_gpu": shape.tokens,
            "side": r.side, "variant": r.label, "schedule": r.schedule,
            "forward_ms": r.forward_s * ms, "backward_ms": r.backward_s * ms,
            "exposed_comm_ms": r.exposed_comm_s * ms, "optimizer_ms": r.optimizer_s * ms,
            "step_ms": r.step_s * ms, "backward_phase_ms": r.backward_phase_s * ms,
            "optimizer_phase_ms": r.optimizer_phase_s * ms, "buckets": r.buckets,
            "x_torch": torch_s / r.step_s, "host_issue_ms": r.host_issue_s * ms,
            "host_bound": r.host_bound}


def step_cluster(cluster: Cluster, gemm_efficiency: float | None, cudagraphs: bool) -> Cluster:
    """The cluster a step is priced on: with --gemm-efficiency given, one ratio for every
    GEMM (the GPU's per-shape efficiency table set aside); with --cudagraphs, no host cost
    per kernel launch (the graph is launched once; decision 105)."""
    gpu = cluster.gpu
    if gemm_efficiency is not None:
        gpu = dataclasses.replace(gpu, efficiency_table=())
    if cudagraphs:
        gpu = dataclasses.replace(gpu, host_launch_s=0.0)
    return cluster if gpu is cluster.gpu else dataclasses.replace(cluster, gpu=gpu)


def searched(program, cluster, P: int, numel: int) -> list[tuple[str, object]]:
    """The autotuner's candidates for `program` on `cluster` (hierarchical splits and the
    pipelined hierarchy across nodes), those the GPU backend generates, named auto:..."""
    from workbench import autotune as tuner
    from workbench.cli.simulate import not_generated

    found = tuner.search(program, placement=cluster.placement({"N": numel, "P": P})).candidates
    return [(f"auto:{c.name}", c.program) for c in found
            if c.program != program and not not_generated(c.program, P)]


def simulate_config(shape: ct.GptShape, hardware: str, nodes: int, gpus: int | None,
                    torch_mode: str, cands, bucket_bytes: int, accumulate: str,
                    gemm_efficiency: float | None, every: bool = False,
                    fused: str = "time-share", autotune_from=None,
                    collective_grid: int = 0, quiet: bool = True, cudagraphs: bool = False
                    ) -> tuple[list[dict], list[StepResult]]:
    """The rows of one cluster: torch, then the workbench after backward and in backward,
    each with the schedule of its fastest step (`every`: a row per schedule); with
    `autotune_from` (the optimizer program) also the autotuner's candidates; the fused
    kernels' grid capped at `collective_grid` blocks (0: the full grid; design note 98);
    `cudagraphs`: the step runs as CUDA graphs (no host cost per launch).
    Unless `quiet`, a progress bar on a terminal names the schedule being priced and run."""
    cluster = step_cluster(load_hardware(hardware, nodes), gemm_efficiency, cudagraphs)
    P = cluster.world_size if gpus is None else gpus
    if not (1 <= P <= cluster.world_size):
        raise WorkbenchError(f"--gpus must be 1..{cluster.world_size} (the GPUs of {nodes} "
                             f"node(s) of {hardware}), got {P}; add --nodes or lower it")
    eff = gemm_efficiency_for(hardware, shape.dtype, gemm_efficiency)
    ddp = torch_mode == "ddp" or (torch_mode == "auto" and P > 1)
    torch_r = simulate_step(shape, cluster, P, Side("torch", ddp=ddp), eff)
    rows, results = [row(hardware, nodes, shape, torch_r, torch_r.step_s)], [torch_r]
    numels = workbench_bucket_numels(shape, P, bucket_bytes, accumulate)
    where = f"simulate-step {hardware} x{nodes}:"
    if autotune_from is not None:
        with status(f"{where} the autotuner searches", quiet):
            cands = [*cands, *searched(autotune_from, cluster, P, max(numels))]
    options = CodegenOptions(collective_grid=collective_grid)
    priced = [(name, bucket_stages(program, cluster, P, numels, fused, options))
              for name, program in progress(cands, f"{where} pricing", lambda c: c[0],
                                            plain=False, quiet=quiet)]
    for overlap in (False, True):
        mode = []
        for name, stages in progress(priced, f"{where} optimizer {'in' if overlap else 'after'}"
                                     " backward", lambda c: c[0], plain=False, quiet=quiet):
            if stages is None:
                continue
            side = Side("workbench", overlap=overlap, accumulate=accumulate,
                        bucket_bytes=bucket_bytes, schedule=name, stages=stages)
            mode.append(simulate_step(shape, cluster, P, side, eff))
        if not mode:
            raise WorkbenchError(f"the optimizer program must have a schedule that runs "
                                 f"buckets of N = {sorted(set(numels))} on P = {P}, got none; "
                                 "pick another --program or --schedule")
        if not every:  # auto: the schedule of the fastest step
            mode = [min(mode, key=lambda r: r.step_s)]
        results += mode
        rows += [row(hardware, nodes, shape, r, torch_r.step_s) for r in mode]
    return rows, results


def print_table(rows: list[dict]) -> None:
    head = f"{'hardware':<12} {'nodes':>5} {'P':>5}  {'variant':<44} " + " ".join(
        f"{h:>9}" for h in ("fwd ms", "bwd ms", "exp.comm", "opt ms", "step ms", "x torch"))
    click.echo(head)
    for r in rows:
        name = r["variant"] + (f" ({r['schedule']})" if r["schedule"] else "")
        click.echo(f"{r['hardware']:<12} {r['nodes']:>5} {r['P']:>5}  {name[:44]:<44} "
                   + " ".join(f"{r[k]:>9.3f}" for k in ("forward_ms", "backward_ms",
                                                       "exposed_comm_ms", "optimizer_ms",
                                                       "step_ms", "x_torch")))


@click.command("simulate-step")
@click.option("--d-model", type=int, default=256, show_default=True, help="Model width.")
@click.option("--layers", type=int, default=4, show_default=True, help="Transformer blocks.")
@click.option("--heads", type=int, default=4, show_default=True, help="Attention heads.")
@click.option("--vocab", type=int, default=91, show_default=True,
              help="Vocabulary (91: the characters of examples/data/tiny.txt).")
@click.option("--seq", type=int, default=128, show_default=True,
              help="Tokens per sequence (train_gpt.py's --block).")
@click.option("--batch", type=int, default=16, show_default=True, help="Sequences per GPU.")
@click.option("--dtype", default="f32", show_default=True, help="f32 (the example), bf16, f16.")
@click.option("--hardware", "hardwares", multiple=True, default=("h100x8",), show_default=True,
              help="Preset or profile file; repeat to sweep.")
@click.option("--nodes", "nodes_list", type=int, multiple=True, default=(1,), show_default=True,
              help="Nodes of the cluster; repeat to sweep.")
@click.option("--gpus", type=int, default=None,
              help="Data-parallel GPUs P (default: every GPU of the cluster).")
@click.option("--torch", "torch_mode", type=click.Choice(["auto", "ddp", "plain"]),
              default="auto", show_default=True,
              help="torch's side: DDP, or the plain model (P = 1 only); auto: plain at P = 1 "
              "(the fastest torch baseline there, design note 65), DDP above.")
@click.option("--program", "program_file", default="studies/adam.py", show_default=True,
              help="The workbench's optimizer program (train_gpt.py's --program).")
@click.option("--schedule", default="auto", show_default=True,
              help="Its schedule (every bucket); auto: the one of the fastest step, per "
              "mode; all: a row per schedule.")
@click.option("--autotune", is_flag=True,
              help="Add the autotuner's candidates for each cluster (hierarchical splits, the "
              "pipelined hierarchy across nodes), those the GPU backend generates.")
@click.option("--bucket-mb", type=float, default=25.0, show_default=True,
              help="Bucket size in MiB (DDP's bucket_cap_mb; the workbench's buckets).")
@click.option("--accumulate", type=click.Choice(sorted(ct.WB_GRAD_PASSES)), default="copy",
              show_default=True, help="How the workbench moves a gradient into its bucket: "
              "copy (wbtorch), add (into a zeroed view, as GPU run 30 ran) or lend (P = 1: "
              "a large parameter's own bucket reads .grad in place).")
@click.option("--gemm-efficiency", type=float, default=None,
              help="Fraction of peak_flops every GEMM reaches, setting aside the GPU's "
              "per-shape efficiency table (default: the table where it has the dtype, else "
              "the calibrated ratio for presets, 1 for profiles).")
@click.option("--cudagraphs", is_flag=True,
              help="The step runs as CUDA graphs: no host time per kernel launch (without it "
              "the host issues each kernel in the GPU's host_launch_s and a step of short "
              "kernels is host-bound).")
@click.option("--fused", type=click.Choice(FUSED_MODES), default="time-share",
              show_default=True, help="How a fused collective shares the GPU with backward: "
              "time-share (measured, design note 16) or beside (an optimistic bound: only its "
              "computation takes the SMs).")
@click.option("--collective-grid", type=click.IntRange(min=0), default=0, show_default=True,
              help="A fused collective's grid in blocks at most (wbtorch's "
              "CodegenOptions.collective_grid; 0: the full grid): a capped kernel holds that "
              "many SMs and backward runs on the rest (design note 98).")
@click.option("--force", is_flag=True,
              help="Past the shape's work limits (1024 layers, 65536 sequences, 2^22 tokens "
              "per GPU, ...), which bound only the prediction's time and memory.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write the table.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the table.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False),
              help="The last configuration's timelines as a Perfetto trace.")
@click.option("--quiet", is_flag=True,
              help="No progress bar on stderr (there is none where stderr is no terminal).")
def simulate_step_command(d_model, layers, heads, vocab, seq, batch, dtype, hardwares,
                          nodes_list, gpus, torch_mode, program_file, schedule, autotune,
                          bucket_mb,
                          accumulate, gemm_efficiency, cudagraphs, fused, collective_grid,
                          force, csv_path, json_path, trace_path, quiet) -> None:
    """Predict a training step of the example GPT per phase, for torch (DDP + fused AdamW) and
    the workbench's optimizer (no GPU needed)."""
    check_output_files({"--csv": csv_path, "--json": json_path, "--trace": trace_path})
    shape = ct.GptShape(d_model, layers, heads, vocab, seq, batch, dtype)
    if not force:
        ct.check_work_limits(shape)
    if not (math.isfinite(bucket_mb) and bucket_mb > 0):
        raise WorkbenchError(f"--bucket-mb must be a number > 0, got {bucket_mb}; e.g. 25")
    bad = [n for n in nodes_list if n < 1]
    if bad:
        raise WorkbenchError(f"--nodes must be a positive integer, got {bad[0]}; e.g. --nodes 2")
    loaded, cands = candidate_programs(program_file, schedule)
    rows, last = [], []
    for hw in hardwares:
        for nodes in nodes_list:
            got, last = simulate_config(shape, hw, nodes, gpus, torch_mode, cands,
                                        int(bucket_mb * 2**20), accumulate, gemm_efficiency,
                                        every=schedule == "all", fused=fused,
                                        autotune_from=loaded.program if autotune else None,
                                        collective_grid=collective_grid, quiet=quiet,
                                        cudagraphs=cudagraphs)
            rows += got
    click.echo(f"GPT d_model {d_model}, {layers} layers, {heads} heads, vocab {vocab}, "
               f"{batch} x {seq} tokens per GPU, {dtype}: {ct.parameter_count(shape):,} "
               "parameters")
    print_table(rows)
    if csv_path:
        import pandas as pd

        write_csv(pd.DataFrame(rows, columns=list(COLUMNS)), csv_path)
        say_written(csv_path, f"the table, {len(rows)} rows (CSV)")
    if json_path:
        write_atomic(json_path, json.dumps({"shape": {"d_model": d_model, "layers": layers,
                                                      "heads": heads, "vocab": vocab,
                                                      "seq": seq, "batch": batch,
                                                      "dtype": dtype},
                                            "rows": rows}, indent=1))
        say_written(json_path, f"the table, {len(rows)} rows (JSON)")
    if trace_path:
        from simulator.timeline import SimResult
        from simulator.trace import chrome_trace

        runs = [(r.label, SimResult(r.step_s, list(r.rows), 1, r.P, True)) for r in last]
        write_atomic(trace_path, json.dumps(chrome_trace(runs)))
        say_written(trace_path, f"the last configuration's timelines, {len(runs)} run(s) (open "
                    "in ui.perfetto.dev)")
