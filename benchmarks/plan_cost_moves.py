"""How the cost model's prediction moves from pricing IR statements (program_cost) to pricing
the lowered plan's steps (cost_model.plan_cost, design note 74), and with --simulate how the
simulated time moves from running statements to running plan steps (simulator.plan_steps,
note 75): every shipped study's named schedules and autotuner candidates (depth 4, 40
candidates) at its default sizes, one line per schedule that the backend generates and whose
time moved by more than 1e-6.

    python benchmarks/plan_cost_moves.py [--simulate] [HARDWARE] [NODES]

(HARDWARE: a preset or a profile file, default h200x4; NODES default 1.) No GPU needed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from codegen.lower import lower
from cost_model.hardware import load_hardware
from cost_model.ops import program_cost
from cost_model.plan_cost import plan_cost
from simulator import simulate
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
    pf = load(str(ROOT / spec))
    programs = [("unscheduled", pf.program), *((n, s.apply()) for n, s in pf.schedules.items())]
    found = autotune.search(pf.program, max_depth=4, max_candidates=40)
    programs += [(c.name, c.program) for c in found.candidates[1:]]
    try:
        sizes = resolve_sizes(pf.program, pf.sizes, {}, cluster)
    except WorkbenchError:
        return []  # no default sizes
    P = sizes.get("P", cluster.world_size)
    out = []
    for name, program in programs:
        try:
            plan = lower(program, P)
            bound = bind_sizes(program, sizes)
            ir = program_cost(program, cluster, bound)
        except WorkbenchError:
            continue  # not generated, or not on this cluster: no plan price
        if simulated:
            base = simulate(program, cluster, bound, record=False).time_s
            sim = Simulation(program, cluster, bound, record=False, plan=plan)
            out.append((name, base, sim.run().time_s, len(program.stmts) - len(sim.from_plan)))
            continue
        priced = plan_cost(plan, cluster, bound)
        out.append((name, float(ir.time_s), float(priced.time_s), 0))  # every step priced
    return out


def main(argv: list[str]) -> None:
    simulated = "--simulate" in argv
    argv = [a for a in argv if a != "--simulate"]
    cluster = load_hardware(argv[0] if argv else "h200x4", int(argv[1]) if len(argv) > 1 else 1)
    for spec in studies():
        rows = moves(spec, cluster, simulated)
        moved = [r for r in rows if r[1] and abs(r[2] / r[1] - 1) > 1e-6]
        print(f"{spec}: {len(rows)} generated, {len(moved)} moved")
        for name, ir, plan, by_ir in moved:
            print(f"  {name:44s} IR {ir * 1e3:9.4f} ms  plan {plan * 1e3:9.4f} ms  "
                  f"{(plan / ir - 1) * 100:+6.2f} %  (statements by the IR: {by_ir})")


if __name__ == "__main__":
    main(sys.argv[1:])
