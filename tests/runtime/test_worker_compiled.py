"""A rank's whole path through a compiled folder, on the CPU (the CUDA driver faked): the job
names the folder, the rank reads its program and plans, computes the inputs and the
reference, runs and times every schedule and writes a record for each. The first GPU run of
this path (this session's call 1) ended in a KeyError before any kernel ran; this test would
have caught it."""

import json

import numpy as np
from test_restore_inputs import _Drv, _Fn

import workbench.runtime.worker as worker
from codegen.compiled import read_compiled
from workbench.cli.main import main


class _Comm:
    def summary(self):
        return "faked"


class _Drv2(_Drv):
    def mem_get_ipc_handle(self, ptr):
        return b"handle"  # one rank: its own buffers, never mapped

    def memcpy_dtoh(self, arr, ptr):
        arr[...] = np.zeros_like(arr)  # no kernel ran: zeros, which the check rejects


class _Gpu:
    """What worker.main reads of a Gpu, one rank, no device."""

    name, sm_count, rank, world = "faked", 4, 0, 1

    def __init__(self, rank, world):
        self.log = []
        self.drv = _Drv2(self.log)
        self.comm = _Comm()

    def all_gather(self, obj):
        return [obj]

    def function(self, name, source):
        return _Fn(self.log)

    def collective(self, op, *a, **k):
        self.log.append(("nccl", op))

    def use_stages(self, stages):
        pass

    def barrier(self):
        pass

    def close(self):
        pass


def test_a_rank_runs_a_compiled_folder_to_a_record_per_schedule(tmp_path, monkeypatch):
    folder = tmp_path / "sgd"
    assert main(["compile", "studies/sgd.py", "--gpus", "1", "--out", str(folder),
                 "--no-nvcc"]) == 0
    out = tmp_path / "results.json"
    job = {"out": str(out), "programs": [{"folder": str(folder), "schedules": ["all"]}],
           "sizes": [{"N": 4096}], "reps": 2, "warmup": 1, "baselines": False}
    (tmp_path / "job.json").write_text(json.dumps(job))
    monkeypatch.setenv("WB_RANK", "0")
    monkeypatch.setenv("WB_WORLD_SIZE", "1")
    monkeypatch.setattr(worker, "Gpu", _Gpu)
    # the versions of torch, NCCL and the driver: the GPU machine's, not this test's
    monkeypatch.setattr(worker, "_meta", lambda gpu, P, job: {"device": gpu.name, "P": P,
                                                              **worker.job_meta(job)})
    assert worker.main(str(tmp_path / "job.json")) == 0
    records = json.loads(out.read_text())["records"]
    names = [n for n, _ in read_compiled(str(folder)).plans(["all"])]
    assert [r["schedule"] for r in records] == names
    for r in records:
        assert r["spec"].endswith("sgd.py") and r["sizes"]["N"] == 4096
        # nothing ran, so every generated schedule's outputs are the faked zeros: a
        # mismatch the check names, not a crash
        assert r["check"].startswith("MISMATCH") or r["check"].startswith("not generated")
