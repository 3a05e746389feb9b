"""The GPU half of calibration, as far as a CPU can check it: the mixed f16/f32 stream kernels
render and compile (with nvcc where installed), the block sweep's grids and grid swap, the
CSVs beside the profile, and a failed block sweep that leaves the rest of the raw file."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_calibration_dtypes import FUSED, NBYTES, _known

from cost_model import calibration
from workbench.errors import RuntimeFault
from workbench.runtime import calibrate, calibrate_kernels, calibrate_nccl, calibrate_worker
from workbench.runtime.launches import KernelLaunch, NcclCall

NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()


def test_f16_stream_source_has_a_kernel_per_shape():
    src, names = calibrate_kernels.streams_f16_source(calibration.F16_STREAM_SHAPES)
    assert sorted(names) == sorted(calibration.F16_STREAM_SHAPES)
    for (a, b, c, d), name in names.items():
        kernel = src[src.index(name):].split('extern "C"')[0]
        assert kernel.count("wb::load_vec<8>") == a + b  # one 8-element load per input
        assert kernel.count("wb::store_vec<8>") == c + d
        assert kernel.count("const __half*") == b and kernel.count("__half* __restrict__ k") == d


@pytest.mark.skipif(not NVCC, reason="nvcc (CUDA toolkit) not installed")
def test_stream_kernels_compile(cubin_cache):
    from codegen.render import include_dir
    from workbench.runtime.compiler import compile_cubin

    src, names = calibrate_kernels.streams_f16_source(calibration.F16_STREAM_SHAPES)
    cubin = compile_cubin("wb_cal_streams_f16", src, include_dir()).read_bytes()
    assert all(n.encode() in cubin for n in names.values())
    name, src = calibrate_kernels.streams_source(4, 3)
    assert name.encode() in compile_cubin(name, src, include_dir()).read_bytes()


def test_block_sweep_grids():
    assert calibration.fused_block_counts(132, 264) == [4, 8, 16, 33, 66, 132, 264]
    assert calibration.fused_block_counts(108, 216) == [3, 6, 13, 27, 54, 108, 216]
    assert calibration.fused_block_counts(132, 132) == [4, 8, 16, 33, 66, 132]


def _launch(kind):
    return KernelLaunch(SimpleNamespace(spec=SimpleNamespace(kind=kind)), "fn", 528, ["args"], 3)


def test_with_grid_changes_only_the_collective_kernel():
    nccl = NcclCall("step", 1, 2, 3)
    run = SimpleNamespace(launches=[nccl, _launch("elementwise"), _launch("collective")])
    assert calibrate_worker._with_grid(run, None) == 528
    assert calibrate_worker._with_grid(run, 16) == 528
    assert run.launches[0] is nccl and [item.grid for item in run.launches[1:]] == [528, 16]
    assert run.launches[2].args == ["args"] and run.launches[2].epoch_at == 3
    assert calibrate_worker._with_grid(run, 264) == 16


def test_with_grid_needs_a_collective_kernel():
    run = SimpleNamespace(launches=[_launch("elementwise")])
    with pytest.raises(RuntimeFault, match=r"the fused AllReduce plan must launch a collective "
                       r"kernel, got none"):
        calibrate_worker._with_grid(run, 8)


def test_csvs_beside_the_profile(tmp_path):
    raw = calibration.synthetic_raw(_known(), 2, NBYTES, FUSED)
    paths = calibrate.write_csvs(raw, tmp_path / "profile")
    assert sorted(p.name for p in paths) == [
        "profile.fused-blocks.csv", "profile.fused.csv", "profile.nccl-bf16.csv",
        "profile.nccl-f16.csv", "profile.nccl.csv"]
    f16 = (tmp_path / "profile.nccl-f16.csv").read_text().splitlines()
    assert f16[0].endswith("f16, CUDA-event median (slowest rank)")
    assert f16[1] == "nbytes,allreduce_ms,reducescatter_ms,allgather_ms"
    assert len(f16) == 2 + len(NBYTES)
    blocks = (tmp_path / "profile.fused-blocks.csv").read_text().splitlines()
    assert blocks[0] == "nbytes,blocks,fused_allreduce_ms" and blocks[1].startswith("268435456,4,")


@pytest.mark.parametrize("flag, key, field, why", [
    ("--fused-blocks", "fused_blocks", "fused_block_bandwidth", "rank 1 exited with code 1"),
    ("--fused-unroll", "fused_unroll", "fused_unroll_bandwidth", "rank 0 exited with code 1"),
])
def test_failed_sweep_is_recorded_and_the_raw_file_still_fits(monkeypatch, tmp_path, flag, key,
                                                             field, why):
    """A block or unroll sweep whose ranks die is recorded as its error; the profile still
    fits, without that curve."""
    from workbench.runtime import launcher

    def dead(*args, **kwargs):
        raise RuntimeFault(why)

    monkeypatch.setattr(launcher, "launch", dead)
    got = calibrate._job(flag, key, 2, 5.0, None)
    assert got == {f"{key}_error": f"RuntimeFault: {why}"}
    raw = calibration.synthetic_raw(_known(), 1, [], [])
    raw.update(got)
    p = tmp_path / "r.raw.json"
    p.write_text(json.dumps(raw))
    assert getattr(calibration.fit(calibration.read_raw(p, 1)).cluster, field) == ()


class _FakeTensor:
    """Just enough of a torch tensor for calibrate_nccl.collectives on a CPU."""

    def __init__(self, n, dtype):
        self.n, self.dtype = n, dtype

    def __getitem__(self, s):
        return _FakeTensor(len(range(*s.indices(self.n))), self.dtype)

    def element_size(self):
        return {"float32": 4, "float16": 2, "bfloat16": 2}[self.dtype]

    def item(self):
        return 0.01


def _fake_torch_dist(calls, broken=()):
    def make(n, device=None, dtype="float32"):
        if dtype in broken:
            raise RuntimeError(f"no {dtype} here")
        return _FakeTensor(n, dtype)

    event = SimpleNamespace(record=lambda: None, synchronize=lambda: None,
                            elapsed_time=lambda other: 0.01)
    torch = SimpleNamespace(
        float32="float32", float16="float16", bfloat16="bfloat16", device=lambda *a: "dev",
        empty=make, randn=make, tensor=lambda values, device=None: _FakeTensor(1, "float32"),
        cuda=SimpleNamespace(synchronize=lambda: None, empty_cache=lambda: None,
                             Event=lambda enable_timing: event))

    def op(name):
        def run(*tensors, **kwargs):
            calls.append((name, tensors[-1].dtype, tensors[-1].n * tensors[-1].element_size()))
        return run

    dist = SimpleNamespace(barrier=lambda: None, all_reduce=op("allreduce"),
                           reduce_scatter_tensor=op("reducescatter"),
                           all_gather_into_tensor=op("allgather"),
                           ReduceOp=SimpleNamespace(MAX="max"))
    return torch, dist


def test_collectives_interleave_dtypes_in_rotating_order(monkeypatch):
    monkeypatch.setattr(calibrate_nccl, "COLLECTIVE_NBYTES", [2**16, 2**17, 2**18, 2**19])
    calls = []
    torch, dist = _fake_torch_dist(calls)
    rows, errors = calibrate_nccl.collectives(torch, dist, 0, 2, 1, 2)
    assert errors == {} and sorted(rows) == ["bf16", "f16", "f32"]
    assert [r["nbytes"] for r in rows["f16"]] == [2**16, 2**17, 2**18, 2**19]
    assert set(rows["f32"][0]) == {"nbytes", "allreduce_ms", "reducescatter_ms", "allgather_ms"}
    # the dtype of each timed all_reduce (the MAX reductions of the medians are f32 of 4 B)
    timed = [(dt, n) for name, dt, n in calls if name == "allreduce" and n > 4]
    firsts = [dt for i, (dt, n) in enumerate(timed) if i == 0 or timed[i - 1][1] != n]
    assert firsts == ["float32", "float16", "bfloat16", "float32"]  # rotating


def test_collectives_leave_out_a_dtype_without_buffers(monkeypatch):
    monkeypatch.setattr(calibrate_nccl, "COLLECTIVE_NBYTES", [2**16, 2**17])
    torch, dist = _fake_torch_dist([], broken=("bfloat16",))
    rows, errors = calibrate_nccl.collectives(torch, dist, 0, 2, 1, 2)
    assert sorted(rows) == ["f16", "f32"]
    assert errors == {"bf16": "RuntimeError: no bfloat16 here"}


def test_collectives_take_the_median_of_passes(monkeypatch):
    monkeypatch.setattr(calibrate_nccl, "COLLECTIVE_NBYTES", [2**16, 2**17])
    timed = iter(range(1, 1000))
    seen = []

    def fake_median(torch, dist, dev, fn, warmup, reps):
        seen.append(next(timed))
        return float(seen[-1]) * (10 if len(seen) % 5 == 0 else 1)  # an outlier now and then

    monkeypatch.setattr(calibrate_nccl, "slowest_median", fake_median)
    torch, dist = _fake_torch_dist([])
    rows, _ = calibrate_nccl.collectives(torch, dist, 0, 2, 1, 2, dtypes=("f32",), passes=3)
    # 2 sizes x 3 kinds per pass: pass k times the first all_reduce as call 6k + 1
    assert len(seen) == 18
    first = rows["f32"][0]
    assert first["nbytes"] == 2**16 and first["allreduce_ms"] == 7.0  # median of 1, 7, 13
    assert rows["f32"][1]["allreduce_ms"] == 16.0  # median of 4, 100 (10 x 10), 16: no outlier


def test_send_recv_pairs_the_halves_through_both_paths(monkeypatch):
    monkeypatch.setattr(calibrate_nccl, "COLLECTIVE_NBYTES", [2**16, 2**20])
    monkeypatch.setattr(calibrate_nccl, "slowest_median",
                        lambda torch, dist, dev, fn, w, r: fn() or 0.5)
    calls = []
    torch, dist = _fake_torch_dist(calls)
    torch.uint8 = "uint8"
    monkeypatch.setattr(_FakeTensor, "data_ptr", lambda self: 4096, raising=False)
    torch.cuda.current_stream = lambda: SimpleNamespace(cuda_stream=7)
    dist.send = lambda t, peer: calls.append(("send", peer, t.n))
    dist.recv = lambda t, peer: calls.append(("recv", peer, t.n))
    nccl = SimpleNamespace(p2p=lambda op, ptr, n, dt, peer, stream: calls.append(
        (f"nccl4py {op}", peer, n, dt, stream)))
    rows = calibrate_nccl.p2p(torch, dist, 1, 4, 1, 2, nccl)  # rank 1 of 4 sends to rank 3
    assert rows == [{"nbytes": 2**16, "sendrecv_ms": 0.5, "nccl4py_sendrecv_ms": 0.5},
                    {"nbytes": 2**20, "sendrecv_ms": 0.5, "nccl4py_sendrecv_ms": 0.5}]
    assert calls == [("send", 3, 2**16), ("nccl4py send", 3, 2**14, "f32", 7),
                     ("send", 3, 2**20), ("nccl4py send", 3, 2**18, "f32", 7)]
    calls.clear()
    calibrate_nccl.p2p(torch, dist, 2, 4, 1, 2, None)  # rank 2 receives from rank 0
    assert calls == [("recv", 0, 2**16), ("recv", 0, 2**20)]


def test_host_issue_times_each_path_once_per_rank(monkeypatch):
    calls = []
    torch, dist = _fake_torch_dist(calls)
    torch.float64 = "float64"
    torch.zeros = lambda n, device=None: _FakeTensor(n, "float32")
    torch.tensor = lambda values, device=None, dtype=None: _FakeTensor(1, "float32")
    torch.cuda.current_stream = lambda: SimpleNamespace(cuda_stream=7)
    monkeypatch.setattr(_FakeTensor, "data_ptr", lambda self: 4096, raising=False)
    dist.send = lambda t, peer: calls.append(("send", peer))
    dist.recv = lambda t, peer: calls.append(("recv", peer))
    nccl = SimpleNamespace(
        collective=lambda op, red, src, dst, n, dt, stream: calls.append(("nccl4py " + op, n)),
        p2p=lambda op, ptr, n, dt, peer, stream: calls.append(("nccl4py " + op, peer)))
    monkeypatch.setattr(calibrate_nccl, "host_issue_s", lambda torch, dist, fn, calls: fn())
    out = calibrate_nccl.host_issue(torch, dist, 3, 4, nccl)  # rank 3 of 4 receives from 1
    assert sorted(out) == ["nccl4py_allreduce_s", "nccl4py_sendrecv_s", "torch_allreduce_s",
                           "torch_sendrecv_s"]
    slowest = ("allreduce", "float32", 4)  # the MAX over ranks after each timed call
    assert calls == [("allreduce", "float32", 4), slowest, ("recv", 1), slowest,
                     ("nccl4py all_reduce", 1), slowest, ("nccl4py recv", 1), slowest]
    assert calibrate_nccl.halves_peer(0, 2) == (1, True)
    assert calibrate_nccl.halves_peer(1, 2) == (0, False)


def test_unroll_sweep_times_each_unroll_and_unroll_1_again(monkeypatch, tmp_path):
    """calibrate_worker --fused-unroll (design note 95): the fused AllReduce lowered at every
    unroll codegen has, then unroll 1 again, each checked and timed; rank 0 writes the rows.
    The GPU is faked: what is checked is the sweep and the file."""
    lowered = []

    class FakeGpu:
        name, sm_count = "fake", 132

        def __init__(self, rank, P):
            pass

        def barrier(self):
            pass

        def close(self):
            pass

    def fake_allreduce(gpu, P, options):
        lowered.append(options.unroll)
        return SimpleNamespace(free=lambda: None), "y", None

    monkeypatch.setenv("WB_RANK", "0")
    monkeypatch.setenv("WB_WORLD_SIZE", "2")
    monkeypatch.setattr(calibrate_worker, "Gpu", FakeGpu)
    monkeypatch.setattr(calibrate_worker, "_fused_allreduce", fake_allreduce)
    monkeypatch.setattr(calibrate_worker, "_checked_ms",
                        lambda gpu, run, out, want, what, warmup, reps: 0.8 + len(lowered) / 100)
    out = tmp_path / "unroll.json"
    assert calibrate_worker.JOBS["--fused-unroll"](str(out)) == 0
    data = json.loads(out.read_text())
    assert lowered == [1, 2, 4, 1]
    assert [r["unroll"] for r in data["fused_unroll"]] == [1, 2, 4, 1]
    assert data["fused_unroll"][1]["ms"] == pytest.approx(0.82)
    assert data["fused_unroll_meta"]["schedule"] == "fused"
