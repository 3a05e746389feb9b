"""The cubin cache trusts nothing it did not write (issue 26): a planted file, a file of
another mode, a file whose content is not what its name says, or a link is never loaded;
nothing is written through a symlink; the folder is private. nvcc is a stand-in here (a
script that writes a known 'cubin'), so these run on any machine."""

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from workbench.errors import RuntimeFault
from workbench.runtime import compiler

SOURCE = 'extern "C" __global__ void wb_k() {}\n'


@pytest.fixture
def cache(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    nvcc = tmp_path / "nvcc"
    # Writes "cubin of <source>" to the -o path and counts its calls.
    nvcc.write_text('#!/bin/sh\necho x >> "' + str(calls) + '"\nout=""; src=""\n'
                    'while [ $# -gt 0 ]; do case "$1" in -o) out="$2"; shift;; *.cu) src="$1";;'
                    ' esac; shift; done\nprintf "cubin of " > "$out"; cat "$src" >> "$out"\n')
    nvcc.chmod(0o755)
    monkeypatch.setattr(compiler, "nvcc_path", lambda: str(nvcc))
    root = tmp_path / "cache"
    monkeypatch.setenv("WB_CACHE_DIR", str(root))
    include = tmp_path / "include"
    include.mkdir()

    def compile_():
        return compiler.compile_cubin("wb_k", SOURCE, include)

    compile_.root, compile_.calls = root, calls
    return compile_


def _ncalls(cache) -> int:
    return len(cache.calls.read_text().split()) if cache.calls.exists() else 0


def test_compiled_once_private_and_content_addressed(cache):
    first = cache()
    assert first.read_bytes() == b"cubin of " + SOURCE.encode()
    assert first.stem.rsplit("-", 1)[1] == hashlib.sha256(first.read_bytes()).hexdigest()[:16]
    assert stat.S_IMODE(cache.root.stat().st_mode) == 0o700
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert cache() == first and _ncalls(cache) == 1
    assert sorted(p.suffix for p in cache.root.iterdir()) == [".cu", ".cubin"]  # no temp left


def test_a_planted_or_tampered_cubin_is_not_loaded(cache):
    first = cache()
    first.write_bytes(b"planted machine code")  # same name, other content
    again = cache()
    assert _ncalls(cache) == 2 and again.read_bytes() == b"cubin of " + SOURCE.encode()


@pytest.mark.parametrize("mode", [0o666, 0o620])
def test_a_cubin_others_may_write_is_not_loaded(cache, mode):
    first = cache()
    first.chmod(mode)
    cache()
    assert _ncalls(cache) == 2


def test_a_link_in_the_cache_is_not_loaded_nor_written_through(cache, tmp_path):
    first = cache()
    target = tmp_path / "victim"
    target.write_text("keep")
    content = first.read_bytes()
    first.unlink()
    (cache.root / first.name).symlink_to(target)  # a link under the cubin's name
    source = next(cache.root.glob("*.cu"))
    source.unlink()
    source.symlink_to(target)  # and under the source's
    got = cache()
    assert target.read_text() == "keep" and not got.is_symlink()
    assert got.read_bytes() == content and not source.is_symlink()


def test_a_wide_cache_folder_of_ours_is_narrowed(cache):
    cache.root.mkdir(mode=0o777)
    os.chmod(cache.root, 0o777)
    cache()
    assert stat.S_IMODE(cache.root.stat().st_mode) == 0o700


def test_a_cache_folder_that_is_a_link_is_refused(cache, tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    cache.root.symlink_to(real)
    with pytest.raises(RuntimeFault, match=r"the cubin cache .* must be a folder of this user "
                       r"\(uid \d+\), got a link; set WB_CACHE_DIR to a private folder"):
        cache()


def test_kernel_names_must_be_identifiers(cache, tmp_path):
    with pytest.raises(RuntimeFault, match=r"kernel name must be a C identifier, got '../x'"):
        compiler.compile_cubin("../x", SOURCE, tmp_path)


def test_device_scripts_use_no_shared_tmp_cache():
    repo = Path(__file__).resolve().parents[2]
    for script in (repo / "benchmarks" / "gpu").glob("*.sh"):
        assert "WB_CACHE_DIR=/tmp" not in script.read_text(), script


def test_a_job_without_an_out_folder_keeps_its_partial_file_private(monkeypatch):
    """Calibration runs jobs with no --out: the partial file goes into a folder of its own
    (mode 0700, a fresh name), never a fixed name in the shared temporary folder."""
    import importlib.util
    import json

    from workbench.runtime import job as runtime_job
    from workbench.runtime import launcher
    from workbench.runtime.worker import ResultsLog

    real = importlib.util.find_spec
    monkeypatch.setattr(runtime_job, "gpu_count", lambda: 8)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "pycuda" else real(name, *a))
    monkeypatch.setattr(compiler, "nvcc_path", lambda: "/usr/bin/true")
    seen = []

    def launch(P, argv, hang_s=60.0, echo=None, **kw):
        out = Path(json.loads(open(argv[-1]).read())["out"])
        seen.append((out, stat.S_IMODE(out.parent.stat().st_mode)))
        ResultsLog(str(out), {"P": P}, writing=True).finish()
        return ["" for _ in range(P)]

    monkeypatch.setattr(launcher, "launch", launch)
    for _ in range(2):
        runtime_job.run_job(["studies/sgd.py"], 2, [{"N": 1024}], "all", 20, 2, False, 60.0)
    (first, mode), (second, _) = seen
    assert mode == 0o700 and first.parent != second.parent
    assert first.parent.name.startswith("wb-partial-") and not first.parent.exists()



@pytest.mark.parametrize("end", ["refused before launch", "Ctrl-C", "a rank's fault"])
def test_a_private_partial_folder_outlives_the_run_only_with_the_file_its_fault_names(
        monkeypatch, tmp_path, end):
    """The private folder stayed in /tmp, empty, after a job refused before launch (no GPUs)
    or cut by Ctrl-C; it stays only when a rank's fault names the partial file in it."""
    import importlib.util
    import tempfile

    from workbench.runtime import job as runtime_job
    from workbench.runtime import launcher
    from workbench.runtime.worker import ResultsLog

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "pycuda" else real(name, *a))
    monkeypatch.setattr(compiler, "nvcc_path", lambda: "/usr/bin/true")

    def no_gpus(command="compile-and-measure"):
        raise RuntimeFault(f"{command} must run on a machine with NVIDIA GPUs, got none")

    def launch(P, argv, hang_s=60.0, echo=None, **kw):
        log = ResultsLog(json.loads(open(argv[-1]).read())["out"], {"P": P}, writing=True)
        log.append({"name": "unscheduled"})
        if end == "Ctrl-C":
            raise KeyboardInterrupt
        raise RuntimeFault("rank 1 died")

    monkeypatch.setattr(runtime_job, "gpu_count", no_gpus if end == "refused before launch"
                        else lambda: 8)
    monkeypatch.setattr(launcher, "launch", launch)
    with pytest.raises(KeyboardInterrupt if end == "Ctrl-C" else RuntimeFault) as raised:
        runtime_job.run_job(["studies/sgd.py"], 2, [{"N": 1024}], "all", 20, 2, False, 60.0)
    left = [p for p in tmp_path.iterdir() if p.name.startswith("wb-partial-")]
    if end == "a rank's fault":
        (kept,) = left
        assert str(kept) in str(raised.value) and list(kept.iterdir())
    else:
        assert left == []


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_cache_entry_that_is_a_folder_or_a_fifo_neither_hangs_nor_is_loaded(cache, kind):
    """A FIFO under a cubin's name hung the open forever, a folder was a traceback (issue 40):
    now the entry is passed over, and renaming the fresh cubin onto it says what to remove."""
    first = cache()
    first.unlink()
    os.mkfifo(first) if kind == "fifo" else first.mkdir()
    with pytest.raises(RuntimeFault, match=f"the cubin cache entry {first} must be a file, got "
                       f"{'a folder' if kind == 'folder' else 'a special file'}; remove it"):
        cache()
    assert _ncalls(cache) == 2
    assert not [p for p in cache.root.iterdir() if p.name.startswith(".")]  # no work folder


def test_a_fifo_among_the_cached_cubins_is_not_opened_blocking(cache):
    first = cache()
    os.mkfifo(first.with_name(f"wb_k-{first.stem.split('-')[1]}-0000000000000000.cubin"))
    assert cache() == first and _ncalls(cache) == 1  # the FIFO sorts first, and is passed over


def test_ctrl_c_during_nvcc_leaves_no_work_folder(cache, monkeypatch):
    """nvcc takes seconds; a Ctrl-C then left the kernel's work folder in the cache."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(compiler.subprocess, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cache()
    assert list(cache.root.iterdir()) == []


@pytest.mark.parametrize("sig", ["KILL", "INT"])
def test_nvcc_stopped_by_a_signal_is_said_so_and_leaves_no_work_folder(cache, tmp_path,
                                                                      monkeypatch, sig):
    """nvcc killed (the OOM killer): a RuntimeFault naming the signal and the kernel, not a
    compile error pointing at a source that is fine; nvcc itself dying of SIGINT is the
    user's Ctrl-C. Either way no work folder stays in the cache."""
    nvcc = tmp_path / "nvcc-dies"
    nvcc.write_text(f"#!/bin/sh\nkill -{sig} $$\n")
    nvcc.chmod(0o755)
    monkeypatch.setattr(compiler, "nvcc_path", lambda: str(nvcc))
    if sig == "KILL":
        with pytest.raises(RuntimeFault, match=r"^nvcc must finish compiling kernel wb_k, got "
                                               r"stopped by SIGKILL \(out of memory\?"):
            cache()
    else:
        with pytest.raises(KeyboardInterrupt):
            cache()
    assert not [p for p in cache.root.iterdir() if p.name.startswith(".")]
