"""nvcc's register and spill figures of the row kernels in each shape (design notes 86, 91), on
the CPU: for every row-kernel case of tests/codegen/codegen_cases.py, the resident form (the
default), the rows form (CodegenOptions.row_grid = "rows") and the rows form at bound 1
(row_min_blocks = 1): `nvcc -arch=sm_90 -cubin -Xptxas -v` registers and spill-store bytes,
and the LDL/STL instructions in `cuobjdump -sass`, of the whole kernel and of its 16-byte
vector path alone (the alignment test forced true, so the single-element path is dead code).

    CUOBJDUMP=.../cuobjdump python benchmarks/gpu/rows_nvcc.py > nvcc-registers.txt

(cuobjdump: pip's nvidia-cuda-cuobjdump; without it the LDL/STL columns are '-').
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "codegen"))

FORMS = {"resident": {}, "rows": {"row_grid": "rows"},
         "rows-mb1": {"row_grid": "rows", "row_min_blocks": 1}}


def build(src: str, where: Path, include: str, cuobjdump: str | None) -> tuple:
    """(registers, spill-store bytes, LDL/STL instructions or '-') of one kernel's source."""
    cu, cubin = where / "k.cu", where / "k.cubin"
    cu.write_text(src)
    r = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(cubin), f"-I{include}",
                        "-Xptxas", "-v", str(cu)], capture_output=True, text=True, check=True)
    regs = re.findall(r"Used (\d+) registers", r.stderr)[0]
    spill = re.findall(r"(\d+) bytes spill stores", r.stderr)[0]
    local = "-"
    if cuobjdump:
        sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True,
                              text=True, check=True).stdout
        local = str(len(re.findall(r"\b(?:LDL|STL)\b", sass)))
    return regs, spill, local


def main() -> int:
    from codegen_cases import CASES, case_program

    from codegen.lower import lower
    from codegen.render import include_dir, render
    from workbench.options import CodegenOptions

    cuobjdump = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    version = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    release = next((x for x in version.splitlines() if "release" in x), version.strip())
    print(f"# {release}; -arch=sm_90 -cubin -Xptxas -v; LDL/STL in cuobjdump -sass "
          f"({'found' if cuobjdump else 'not found: -'})")
    print("# whole: every path; vector: the 16-byte vector path alone (alignment forced true)")
    print(f"{'case':46} {'form':9} {'bound':10} {'regs':>4} {'spill B':>7} {'LDL/STL':>7} | "
          f"vector: {'regs':>4} {'spill B':>7} {'LDL/STL':>7}")
    cases = [c for c in CASES if c[0].startswith(("allreduce-rmsnorm-fuse", "rows-",
                                                  "allreduce-rmsnorm-bf16-fuse"))
             and "-rowgrid-" not in c[0]]
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            for form, knobs in FORMS.items():
                plan = lower(case_program(case), case[3], CodegenOptions(**knobs))
                for k in plan.kernels():
                    if k.row is None:
                        continue
                    src = render(k)
                    whole = build(src, Path(tmp), include_dir(), cuobjdump)
                    vec = build(src.replace("wb::aligned16(align_bits) && cols % V == 0",
                                            "true"), Path(tmp), include_dir(), cuobjdump)
                    bound = re.search(r"__launch_bounds__\((\d+, \d+)\)", src).group(1)
                    print(f"{case[0]:46} {form:9} {bound:10} {whole[0]:>4} {whole[1]:>7} "
                          f"{whole[2]:>7} | vector: {vec[0]:>4} {vec[1]:>7} {vec[2]:>7}",
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
