"""How the cost model's prediction moves from pricing IR statements (program_cost) to pricing
the lowered plan's steps (cost_model.plan_cost, design note 74), and with --simulate how the
plan's simulated time stands against the IR-level model (the simulator runs plan steps only
since decision 104; before it, the statements' run): every shipped study's named schedules
and autotuner candidates (depth 4, 40
candidates) at its default sizes, one line per schedule that the backend generates and whose
time moved by more than 1e-6.

    python benchmarks/plan_cost_moves.py [--simulate] [HARDWARE] [NODES]

(HARDWARE: a preset or a profile file, default h200x4; NODES default 1.) No GPU needed.
Between two commits (design note 87): `--tsv [HARDWARE] [NODES] > F` prints every generated
schedule's IR-level model, plan price and plan-simulated time, run once in each commit's tree
(PYTHONPATH at that tree), and `--compare BEFORE.tsv AFTER.tsv` lists what moved.
"""

from __future__ import annotations

import sys
from pathlib import Path

from codegen.lower import lower
from cost_model.hardware import load_hardware
from cost_model.ops import program_cost
from cost_model.plan_cost import plan_cost
from simulator.engine import Simulation
from workbench import autotune
from workbench.cli.simulate import resolve_sizes
from workbench.errors import WorkbenchError
from workbench.interpreter import bind_sizes
from workbench.loader import load

ROOT = Path(__file__).resolve().parents[1]
SKIP = {"__init__.py", "sweep.py", "optimizer_schedules.py"}


def studies() -> list[str]:
    """The shipped program files (and adam's mixed-precision program)."""
    found = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "studies").glob("*.py")
                   if p.name not in SKIP)
    return found + ["studies/adam.py:mixed"]


def moves(spec: str, cluster, simulated: bool = False) -> list[tuple[str, float, float, int]]:
    """(schedule, IR-level seconds, plan seconds, statements run by statement: none since
    design note 87, every step has its price and its process) for
    every generated schedule and candidate of one study file: the cost model's, or with
    `simulated` the simulator's."""
    found = _programs(spec, cluster)
    if found is None:
        return []  # no default sizes
    sizes, programs = found
    out = []
    for name, program, plan in programs:
        try:
            bound = bind_sizes(program, sizes)
            ir = program_cost(program, cluster, bound)
        except WorkbenchError:
            continue  # a size it does not bind, or not on this cluster: no plan price
        if simulated:  # the simulator runs plans only (decision 104): against the IR model
            sim = Simulation(program, cluster, bound, record=False, plan=plan)
            out.append((name, float(ir.time_s), sim.run().time_s, 0))
            continue
        priced = plan_cost(plan, cluster, bound)
        out.append((name, float(ir.time_s), float(priced.time_s), 0))  # every step priced
    return out


def _programs(spec: str, cluster):
    """(sizes, [(name, program, plan)]) of every generated schedule and candidate of a study
    at its default sizes on `cluster`, or None without default sizes."""
    pf = load(str(ROOT / spec))
    programs = [("unscheduled", pf.program), *((n, s.apply()) for n, s in pf.schedules.items())]
    found = autotune.search(pf.program, max_depth=4, max_candidates=40)
    programs += [(c.name, c.program) for c in found.candidates[1:]]
    try:
        sizes = resolve_sizes(pf.program, pf.sizes, {}, cluster)
    except WorkbenchError:
        return None
    out = []
    for name, program in programs:
        try:
            out.append((name, program, lower(program, sizes.get("P", cluster.world_size))))
        except WorkbenchError:
            continue  # not generated
    return sizes, out


def tsv(cluster) -> None:
    """Print every generated schedule's IR-level model, plan price and plan-simulated time
    (seconds), tab-separated: what `--compare` reads, at two commits."""
    for spec in studies():
        found = _programs(spec, cluster)
        for name, program, plan in (found or ({}, []))[1]:
            try:
                bound = bind_sizes(program, found[0])
                ir = float(program_cost(program, cluster, bound).time_s)
            except WorkbenchError:
                continue  # a size it does not bind, or not on this cluster
            priced = float(plan_cost(plan, cluster, bound).time_s)
            sim = Simulation(program, cluster, bound, record=False, plan=plan).run().time_s
            print(f"{spec}\t{name}\t{ir!r}\t{priced!r}\t{sim!r}")


def compare(before: str, after: str) -> None:
    """Print the schedules whose IR-level model, plan price or simulated time moved by more
    than 1e-6 between two `--tsv` files."""
    def read(path):
        rows = (line.rstrip("\n").split("\t") for line in Path(path).read_text().splitlines())
        return {(r[0], r[1]): tuple(float(x) for x in r[2:]) for r in rows}

    b, a = read(before), read(after)
    both = sorted(set(a) & set(b))
    print(f"{len(both)} schedules in both; {len(set(b) - set(a))} only before, "
          f"{len(set(a) - set(b))} only after")
    for col, label in enumerate(("IR-level model", "plan model_ms", "simulated time_ms")):
        moved = [(k, b[k][col], a[k][col]) for k in both
                 if b[k][col] and abs(a[k][col] / b[k][col] - 1) > 1e-6]
        print(f"{label}: {len(moved)} moved")
        for (spec, name), x, y in moved:
            print(f"  {spec:30s} {name:40s} {x * 1e3:9.4f} -> {y * 1e3:9.4f} ms "
                  f"{(y / x - 1) * 100:+6.2f} %")


def main(argv: list[str]) -> None:
    if argv[:1] == ["--compare"]:
        compare(*argv[1:3])
        return
    simulated, as_tsv = "--simulate" in argv, "--tsv" in argv
    argv = [a for a in argv if a not in ("--simulate", "--tsv")]
    cluster = load_hardware(argv[0] if argv else "h200x4", int(argv[1]) if len(argv) > 1 else 1)
    if as_tsv:
        tsv(cluster)
        return
    for spec in studies():
        rows = moves(spec, cluster, simulated)
        moved = [r for r in rows if r[1] and abs(r[2] / r[1] - 1) > 1e-6]
        print(f"{spec}: {len(rows)} generated, {len(moved)} moved")
        for name, ir, plan, by_ir in moved:
            print(f"  {name:44s} IR {ir * 1e3:9.4f} ms  plan {plan * 1e3:9.4f} ms  "
                  f"{(plan / ir - 1) * 100:+6.2f} %  (statements by the IR: {by_ir})")


if __name__ == "__main__":
    main(sys.argv[1:])
