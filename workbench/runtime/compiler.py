"""Compile rendered kernels with nvcc into cubins, cached on disk by kernel name.

The kernel name is the mangle of its spec, so it is the cache key; the source's hash is part of
the file name too, so an edited template or header never reuses a stale cubin.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from workbench.errors import RuntimeFault

# --fmad=false: the reference interpreter rounds a*b and then a+b separately (numpy); fused
# multiply-adds would differ in the last bit, and Adam's bias correction amplifies that.
# Memory-bound kernels lose nothing measurable by it.
NVCC_FLAGS = ("-arch=sm_90", "-O3", "--fmad=false", "-std=c++17", "-cubin")


def nvcc_path() -> str:
    """nvcc on PATH, else the CUDA toolkit's; a RuntimeFault saying what to install if none."""
    found = shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.access(p, os.X_OK)), None)
    if found is None:
        raise RuntimeFault("nvcc must be on PATH or at /usr/local/cuda/bin/nvcc, got none; "
                           "install the CUDA 13 toolkit (it provides nvcc for sm_90)")
    return found


def cache_dir() -> Path:
    root = Path(os.environ.get("WB_CACHE_DIR", Path.home() / ".cache" / "workbench" / "cubin"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def compile_cubin(name: str, source: str, include_dir: Path) -> Path:
    """The cubin of `source` (entry `name`), compiled once and then taken from the cache."""
    digest = hashlib.sha256((source + " ".join(NVCC_FLAGS)).encode()).hexdigest()[:12]
    for header in sorted(Path(include_dir).glob("*.cuh")):
        digest = hashlib.sha256((digest + header.read_text()).encode()).hexdigest()[:12]
    root = cache_dir()
    cubin = root / f"{name}-{digest}.cubin"
    if cubin.exists():
        return cubin
    src = root / f"{name}-{digest}.cu"
    src.write_text(source)
    return nvcc_compile(name, src, cubin, include_dir)


def nvcc_compile(name: str, src: Path, cubin: Path, include_dir: Path) -> Path:
    """Compile the kernel source file `src` (entry `name`) into `cubin` with NVCC_FLAGS; the
    file appears whole or not at all (ranks compiling the same kernel never see half a one)."""
    fd, tmp = tempfile.mkstemp(suffix=".cubin", dir=Path(cubin).parent)
    os.close(fd)
    cmd = [nvcc_path(), *NVCC_FLAGS, "-I", str(include_dir), "-o", tmp, str(src)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        os.unlink(tmp)
        errors = "\n".join(result.stderr.strip().splitlines()[:20])
        raise RuntimeFault(f"kernel {name} must compile with nvcc, got exit code "
                           f"{result.returncode}:\n{errors}\nthe rendered source is at {src}")
    os.replace(tmp, cubin)
    return Path(cubin)
