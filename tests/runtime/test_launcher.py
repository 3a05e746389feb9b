"""The launcher ends every rank (and what they started) when one dies or hangs; CPU only."""

import os
import sys
import time
from pathlib import Path

import pytest

from workbench.errors import RuntimeFault
from workbench.runtime.launcher import launch

FAKE = str(Path(__file__).with_name("fake_rank.py"))


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


def test_all_ranks_ok_returns_output():
    outs = launch(3, [sys.executable, FAKE, "ok"], hang_s=20)
    assert [o.splitlines()[-1] for o in outs] == ["rank 0 done", "rank 1 done", "rank 2 done"]


def test_a_dying_rank_ends_the_run_and_leaves_nothing(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(RuntimeFault, match=r"rank 1 must exit 0, got exit code 3") as e:
        launch(2, [sys.executable, FAKE, "die", str(tmp_path / "pids")], hang_s=30)
    assert time.monotonic() - t0 < 15
    assert "fails on purpose" in str(e.value)
    time.sleep(0.2)
    assert not any(_alive(p) for p in _pids(tmp_path, 2))


def test_a_hanging_rank_ends_the_run_within_the_bound(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(RuntimeFault, match=r"rank 1 must report progress at least every 2 s"):
        launch(2, [sys.executable, FAKE, "hang", str(tmp_path / "pids")], hang_s=2)
    assert time.monotonic() - t0 < 12
    time.sleep(0.2)
    assert not any(_alive(p) for p in _pids(tmp_path, 2))


def test_multicast_stays_off_in_children():
    outs = launch(1, [sys.executable, "-c",
                      "import os; print(os.environ['NCCL_NVLS_ENABLE'], "
                      "os.environ['TORCH_SYMM_MEM_DISABLE_MULTICAST'], "
                      "os.environ['NVSHMEM_DISABLE_NVLS'])"], hang_s=20)
    assert outs[0].strip() == "0 1 1"
