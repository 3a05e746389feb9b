"""The torch bridge's host exchange over a torch.distributed group (gloo on the CPU, in a
subprocess so that this process's default group stays free for the GPU tests): objects
gathered and broadcast, and the NCCL unique id shared through it as the runtime does."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

CODE = """
import os
import torch.distributed as dist
from workbench.runtime import comm
from workbench.runtime.launcher import free_port
from workbench.runtime.torch_bridge import GroupHost
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
dist.init_process_group("gloo", rank=0, world_size=1)
for group in (None, dist.new_group([0])):
    h = GroupHost(dist, group, 0)
    assert (h.rank, h.size) == (0, 1)
    assert h.allgather({"r": 5}) == [{"r": 5}]
    assert h.bcast(b"x" * 128) == b"x" * 128
    assert comm.share_unique_id(h, 0, lambda: b"u" * 128) == b"u" * 128
dist.destroy_process_group()  # gloo's threads joined here, not in a race with interpreter exit
print("ok", flush=True)
"""


def test_group_host_exchanges_objects_over_a_torch_group():
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, "-c", CODE], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT),
                                                       "PATH": "/usr/bin:/bin"})
    assert done.stdout.strip().endswith("ok"), done.stderr[-2000:]
