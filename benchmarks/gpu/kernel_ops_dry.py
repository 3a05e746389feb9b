"""The CPU-only part of `harness.py replay-kernel-ops`: given the
arguments
of one compile-and-measure command of the GPU run, do everything that command does before it
needs a GPU, so that a command that would fail on the GPU fails here first:

1. parse the arguments with compile-and-measure's own click parser and check its sizes as it
   does (workbench.cli.measure.job_sizes: every --set must name a size of every program; GPU run
   23's
   part 1 stopped at once on that);
2. run `workbench check` on every program with every size set of the job at the job's P;
3. lower every program and schedule for that P and compile each generated kernel with nvcc;
4. unless --no-reference, run the reference interpreter on the run's random inputs at the
   job's sizes, with the reference-overflow check (design note 47).

    python3 benchmarks/gpu/kernel_ops_dry.py [--no-reference] -- COMPILE-AND-MEASURE ARGS...

Prints one line per program/schedule; exits 1 if anything failed.
"""

from __future__ import annotations

import os
import sys
import time


def dry(args: list[str], reference: bool = True) -> int:
    """Dry-run one compile-and-measure command given by its arguments; returns the number of
    failures (each printed). Its kernels compile into WB_CACHE_DIR if that is set, else into
    a fresh cubin cache that is gone after the call (nvcc runs for every kernel)."""
    if "WB_CACHE_DIR" in os.environ:
        return _dry(args, reference)
    from workbench.files import temporary_folder

    with temporary_folder("wb-dry-") as cache:
        os.environ["WB_CACHE_DIR"] = str(cache)
        try:
            return _dry(args, reference)
        finally:
            del os.environ["WB_CACHE_DIR"]


def _dry(args: list[str], reference: bool) -> int:
    from codegen.lower import lower
    from codegen.render import include_dir, render
    from workbench.cli.main import main as cli_main
    from workbench.cli.measure import compile_and_measure, job_sizes
    from workbench.errors import WorkbenchError
    from workbench.loader import load
    from workbench.runtime import checks
    from workbench.runtime.compiler import compile_cubin

    ctx = compile_and_measure.make_context("compile-and-measure", list(args))
    params = ctx.params
    P, specs = params["P"], params["program_files"]
    try:
        sweep = job_sizes(specs, params["sets"])
    except WorkbenchError as e:
        print(f"FAILED: error: {e}", flush=True)
        return 1
    wanted = params["schedule"].split(",")
    failures = 0
    for spec in specs:
        pf = load(spec)
        names = {s.name for s in pf.program.symbols()}
        for entry in sweep:
            sets = [a for k, v in entry.items() for a in ("--set", f"{k}={v}")]
            rc = cli_main(["check", spec, "--hardware", "h100x8", *sets, "--set", f"P={P}"])
            if rc:
                print(f"FAILED: workbench check {spec} {entry} P={P} exited {rc}", flush=True)
                failures += 1
        scheds = [(n, s) for n, s in pf.schedules.items() if "all" in wanted or n in wanted]
        programs = [("unscheduled", pf.program)] + [(n, s.apply()) for n, s in scheds]
        for entry in sweep:
            sizes = {k: v for k, v in {**pf.sizes, **entry}.items() if k in names}
            sizes["P"] = P
            problem, ref_text = "", "reference not run (--no-reference)"
            if reference:
                t0 = time.perf_counter()
                inputs = checks.make_inputs(pf.program, sizes)
                problem = checks.reference(pf.program, inputs, sizes, P).problem
                ref_text = (f"reference {problem or 'finite'} "
                            f"({time.perf_counter() - t0:.1f} s)")
                failures += bool(problem)
            for name, program in programs:
                try:
                    plan = lower(program, P)
                    kernels = [compile_cubin(k.name, render(k), include_dir())
                               for k in plan.kernels()]
                    steps = ", ".join(type(s).__name__ + (
                        f"[{s.epilogue}]" if getattr(s, "epilogue", "") else "")
                        for s in plan.steps)
                    status = "ok"
                except Exception as e:  # report every program, then fail
                    failures += 1
                    kernels, steps, status = [], "", f"FAILED {type(e).__name__}: {e}"
                shown = " ".join(f"{k}={v}" for k, v in sizes.items())
                print(f"{spec} {shown} {name}: {status}; steps {steps}; {len(kernels)} kernels "
                      f"compiled; {ref_text}", flush=True)
    return failures


def main(argv: list[str]) -> int:
    """Command line: [--no-reference] -- compile-and-measure arguments."""
    reference = "--no-reference" not in argv[:argv.index("--") if "--" in argv else 0]
    args = argv[argv.index("--") + 1:] if "--" in argv else argv
    return 1 if dry(args, reference) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
