"""The CPU-only part of benchmarks/gpu/run_ops15.sh (its `dry` part, runnable without a GPU):
every program and schedule the GPU run measures, lowered for P = 1, each generated kernel
rendered and compiled with nvcc, and the reference interpreter run on the run's random inputs
at the check sizes with the reference-overflow check. Prints one line per program/schedule."""

from __future__ import annotations

import os
import sys
import tempfile
import time

SPECS = ["benchmarks/gpu/ops15.py", "benchmarks/gpu/ops15.py:epilogue_f16",
         "benchmarks/gpu/ops15.py:epilogue_bf16", "benchmarks/gpu/ops15.py:epilogue_f32",
         "benchmarks/gpu/ops15.py:epilogue_erf_f16", "benchmarks/gpu/ops15.py:reductions",
         "benchmarks/gpu/ops15.py:broadcast", "studies/parameter_server.py",
         "benchmarks/gpu/ops15.py:mlp"]
SIZES = {"T": 1024, "H": 1024, "F": 4096, "N": 2**20, "P": 1}


def main() -> int:
    os.environ.setdefault("WB_CACHE_DIR", tempfile.mkdtemp(prefix="wb-dry-"))
    from codegen.lower import lower
    from codegen.render import include_dir, render
    from runtime import checks
    from runtime.compiler import compile_cubin
    from workbench.loader import load

    failures = 0
    for spec in SPECS:
        pf = load(spec)
        sizes = {k: v for k, v in SIZES.items()
                 if k in {s.name for s in pf.program.symbols()} or k == "P"}
        t0 = time.perf_counter()
        inputs = checks.make_inputs(pf.program, sizes)
        ref, idx, small = checks.reference(pf.program, inputs, sizes, 1)
        seen = inputs if idx is None else checks.sampled_inputs(pf.program, inputs, idx)
        problem = checks.reference_problem(pf.program, seen, ref, small)
        ref_s = time.perf_counter() - t0
        for name, program in [("unscheduled", pf.program)] + [
                (n, s.apply()) for n, s in pf.schedules.items()]:
            try:
                plan = lower(program, 1)
                kernels = [compile_cubin(k.name, render(k), include_dir()) for k in
                           plan.kernels()]
                steps = ", ".join(type(s).__name__ + (f"[{s.epilogue}]" if getattr(
                    s, "epilogue", "") else "") for s in plan.steps)
                status = "ok"
            except Exception as e:  # report every program, then fail
                failures += 1
                kernels, steps, status = [], "", f"FAILED {type(e).__name__}: {e}"
            print(f"{spec} {name}: {status}; steps {steps}; {len(kernels)} kernels compiled; "
                  f"reference {'finite' if not problem else problem} ({ref_s:.1f} s)",
                  flush=True)
        failures += bool(problem)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
