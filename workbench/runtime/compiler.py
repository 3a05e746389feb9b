"""Compile rendered kernels with nvcc into cubins, cached on disk by kernel name.

The kernel name is the mangle of its spec, so it is the cache key; the source's hash is part of
the file name too, so an edited template or header never reuses a stale cubin.

A cubin is machine code the GPU runs, so the cache is trusted only as far as it is private
(issue 26): the folder must be the user's own, mode 0700 (a folder of ours with a wider mode
is narrowed; anyone else's is refused); a cached cubin is taken only if it is a regular file
of ours that nobody else may write, whose content has the sha256 its name carries
(`{kernel}-{source digest}-{cubin digest}.cubin`: content-addressed by both). nvcc writes into
a private temporary folder inside the cache and the cubin is renamed into place, so nothing
is written through a symlink and ranks compiling the same kernel never see half a file.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import stat
import subprocess
from pathlib import Path

from workbench.errors import RuntimeFault
from workbench.files import temporary_folder

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
    """The cubin cache (WB_CACHE_DIR, else ~/.cache/workbench/cubin): created mode 0700; an
    existing one must be a folder (not a link) of this user, and is narrowed to 0700."""
    root = Path(os.environ.get("WB_CACHE_DIR", Path.home() / ".cache" / "workbench" / "cubin"))
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        what = "a link" if stat.S_ISLNK(st.st_mode) else f"owned by uid {st.st_uid}"
        raise RuntimeFault(f"the cubin cache {root} must be a folder of this user (uid "
                           f"{os.getuid()}), got {what}; set WB_CACHE_DIR to a private folder "
                           "of yours (a cubin from it runs on the GPU)")
    if st.st_mode & 0o077:
        os.chmod(root, 0o700)
    return root


CUBIN_MAX_BYTES = 256 << 20  # a kernel's cubin is kilobytes; a larger cached file is not one
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")


def _trusted_cubin(path: Path) -> bool:
    """Whether `path` may be loaded: a regular file (not a link) of this user that nobody
    else may write, whose content's sha256 starts with the digest its name ends with."""
    try:
        # O_NONBLOCK: a FIFO planted under a cubin's name must not block the open forever;
        # the file's type is checked on the descriptor before anything is read from it
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022 \
                or st.st_size > CUBIN_MAX_BYTES:
            return False
        with os.fdopen(os.dup(fd), "rb") as f:
            content = f.read(CUBIN_MAX_BYTES + 1)
    finally:
        os.close(fd)
    return hashlib.sha256(content).hexdigest()[:16] == path.stem.rsplit("-", 1)[-1]


def compile_cubin(name: str, source: str, include_dir: Path) -> Path:
    """The cubin of `source` (entry `name`), compiled once and then taken from the cache."""
    if not _NAME.fullmatch(name):
        raise RuntimeFault(f"kernel name must be a C identifier, got {name!r}; this is a "
                           "codegen bug: report it")
    digest = hashlib.sha256((source + " ".join(NVCC_FLAGS)).encode()).hexdigest()[:12]
    for header in sorted(Path(include_dir).glob("*.cuh")):
        digest = hashlib.sha256((digest + header.read_text()).encode()).hexdigest()[:12]
    root = cache_dir()
    for cached in sorted(root.glob(f"{name}-{digest}-*.cubin")):
        if _trusted_cubin(cached):
            return cached
    kept = root / f"{name}-{digest}.cu"  # beside its cubin for reading, or nvcc's error
    # ours alone (0700; nvcc reads the source only from here), gone however the call ends
    with temporary_folder(f".{name}-", root) as work:
        src = work / kept.name
        src.write_text(source)
        try:
            out = nvcc_compile(name, src, work / f"{name}.cubin", include_dir)
        except NvccRefused as e:
            _replace_into(src, kept)
            raise NvccRefused(f"{e}\nthe rendered source is at {kept}") from None
        content = out.read_bytes()
        os.chmod(out, 0o600)
        cubin = root / f"{name}-{digest}-{hashlib.sha256(content).hexdigest()[:16]}.cubin"
        _replace_into(out, cubin)  # atomic: ranks compiling one kernel never see half a file
        _replace_into(src, kept)  # a link there is replaced
    return cubin


def _replace_into(tmp: Path, entry: Path) -> None:
    """Rename `tmp` to the cache entry `entry`: a file or a link there is replaced, anything
    else (a folder, a FIFO planted under the name) is a RuntimeFault saying what to remove."""
    try:
        mode = os.lstat(entry).st_mode
    except FileNotFoundError:
        mode = stat.S_IFREG
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        os.unlink(tmp)
        raise RuntimeFault(f"the cubin cache entry {entry} must be a file, got "
                           f"{'a folder' if stat.S_ISDIR(mode) else 'a special file'}; remove "
                           f"it (rm -r '{entry}') or set WB_CACHE_DIR to another folder")
    os.replace(tmp, entry)


class NvccRefused(RuntimeFault):
    """nvcc exited with an error on a kernel's source: a codegen bug, or nvcc's own children
    stopped by a Ctrl-C (nvcc answers that with exit code 2, not by dying of the signal)."""


def nvcc_compile(name: str, src: Path, cubin: Path, include_dir: Path) -> Path:
    """Compile the kernel source file `src` (entry `name`) into `cubin` with NVCC_FLAGS; the
    file appears whole or not at all. `cubin`'s folder is the caller's alone (compile_cubin's
    work folder), so the file nvcc writes before the rename has a fixed name beside it."""
    tmp = Path(cubin).with_suffix(".tmp.cubin")
    cmd = [nvcc_path(), *NVCC_FLAGS, "-I", str(include_dir), "-o", str(tmp), str(src)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
    if result.returncode == -signal.SIGINT:  # a terminal's Ctrl-C reaches nvcc too
        raise KeyboardInterrupt
    if result.returncode < 0:
        raise RuntimeFault(f"nvcc must finish compiling kernel {name}, got stopped by "
                           f"{signal.Signals(-result.returncode).name} (out of memory? "
                           "another process's kill?); run the command again")
    if result.returncode != 0:
        errors = "\n".join(result.stderr.strip().splitlines()[:20])
        raise NvccRefused(f"kernel {name} must compile with nvcc, got exit code "
                          f"{result.returncode}:\n{errors}")
    os.replace(tmp, cubin)
    return Path(cubin)
