"""What Inductor makes of the torch-op optimizer steps that benchmarks/gpu/optimizer_steps.py
times under torch.compile: the fused kernels and the bytes per element each reads and writes.
CPU only (Inductor's scheduler fuses the same way for its C++ and Triton backends; the
kernels' pointer arguments say what they load and store).

    python benchmarks/inductor_step_bytes.py [adam-mixed adam sgd ...]

Prints, per case, each generated kernel's inputs and outputs by dtype and the total bytes per
element, beside the copy floor's bytes of optimizer_steps.CASES (GPU run 22's question:
does the compiled mixed-precision step move the bytes the generated kernel moves?).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"float": 4, "at::Half": 2, "at::BFloat16": 2, "double": 8}


def main(argv=None) -> int:
    import torch
    from torch._inductor.utils import run_and_get_code

    spec = importlib.util.spec_from_file_location(
        "optimizer_steps", ROOT / "benchmarks/gpu/optimizer_steps.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cases = (argv if argv is not None else sys.argv[1:]) or ["adam-mixed", "adam"]
    floors = {c: b for c, _, b in bench.CASES}
    n = 4096
    for case in cases:
        g = torch.Generator().manual_seed(0)
        x = {"g": torch.randn(n, generator=g), "w": torch.randn(n, generator=g)}
        if case == "adam-mixed":
            x["g"] = x["g"].half()
        if case == "sgd-momentum":
            x["b"] = torch.randn(n, generator=g)
        if case in ("adam", "lamb", "adam-mixed"):
            x["m"] = torch.randn(n, generator=g)
            x["v"] = torch.rand(n, generator=g)
        args = bench.state_args(case, x)
        if case == "adam-mixed":
            args.append(torch.empty(n, dtype=torch.half))
        torch._dynamo.reset()
        step = torch.compile(bench.torch_ops_step(torch, case), dynamic=False)
        _, codes = run_and_get_code(step, *args)
        kernels = re.findall(r"cpp_pybinding\(\[([^\]]*)\]", "\n".join(codes))
        total = 0
        print(f"{case}: {len(kernels)} kernel(s); the copy floor's bytes per element: "
              f"{floors.get(case)}")
        for k in kernels:
            params = [p.strip().strip("'\"") for p in k.split(",")]
            ins = [p.removeprefix("const ").rstrip("*") for p in params
                   if p.startswith("const ") and p.endswith("*")]
            outs = [p.rstrip("*") for p in params if not p.startswith("const ")
                    and p.endswith("*")]
            # reductions (LAMB's norms) read their inputs whole; a scalar output is 0 bytes
            # per element: this counts every array pointer as one element per element
            b = sum(SIZES.get(t, 0) for t in ins + outs)
            total += b
            print(f"  reads {ins}, writes {outs}: {b} bytes per element if every pointer "
                  "is an N-array")
        print(f"  total {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
