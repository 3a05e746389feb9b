"""Every CUDA context the runtime pushes through pycuda is popped (GPU run 22: an unpopped push
made pycuda abort every torch-bridge process at exit). CPU only: a fake pycuda driver counts
pushes and pops as pycuda's per-thread context stack would."""

from __future__ import annotations

import threading

import pytest

from workbench.errors import RuntimeFault
from workbench.runtime import gpu as gpu_mod


class FakeContext:
    def __init__(self, stack: list, fail: bool = False):
        self.stack, self.fail = stack, fail

    def push(self):
        self.stack.append(self)

    def pop(self):
        if self.fail:
            raise RuntimeError("context::pop failed")
        assert self.stack, "pop of an empty context stack (pycuda raises LogicError)"
        self.stack.pop()


class FakeDrv:
    """pycuda.driver's part the runtime uses to push: Device(i).retain_primary_context()."""

    def __init__(self):
        self.stack: list = []

    def Device(self, index):  # noqa: N802 (pycuda's name)
        drv = self

        class Device:
            def retain_primary_context(self):
                return FakeContext(drv.stack)

        return Device()


@pytest.fixture(autouse=True)
def _clean():
    before = list(gpu_mod._PUSHED)
    yield
    gpu_mod._PUSHED[:] = before


def test_a_push_is_popped_once_and_close_is_idempotent():
    drv = FakeDrv()
    ctx = gpu_mod.push_primary_context(drv, 0)
    assert len(drv.stack) == 1 and ctx in gpu_mod._PUSHED
    ctx.pop()
    ctx.pop()  # a second close (e.g. release_devices, then the exit hook) pops nothing
    assert drv.stack == [] and ctx not in gpu_mod._PUSHED


def test_the_exit_hook_pops_what_is_still_pushed_and_survives_a_failing_pop(capsys):
    drv = FakeDrv()
    a = gpu_mod.push_primary_context(drv, 0)
    b = gpu_mod.push_primary_context(drv, 0)
    bad = gpu_mod.PushedContext(FakeContext([], fail=True))
    a.pop()  # one closed by its owner already
    assert gpu_mod.pop_pushed_contexts() == 1  # b; bad's pop raised and was reported
    assert drv.stack == [] and not b.pushed
    assert bad not in gpu_mod._PUSHED
    assert "popping a CUDA context at exit failed: RuntimeError" in capsys.readouterr().err
    assert gpu_mod.pop_pushed_contexts() == 0


def test_the_exit_hook_is_registered_once(monkeypatch):
    import atexit

    calls = []
    monkeypatch.setattr(atexit, "register", lambda fn: calls.append(fn))
    monkeypatch.setattr(gpu_mod, "_EXIT_HOOKED", [])
    drv = FakeDrv()
    for _ in range(3):
        gpu_mod.push_primary_context(drv, 0).pop()
    assert calls == [gpu_mod.pop_pushed_contexts]


def test_a_pop_on_another_thread_is_refused_with_why():
    drv = FakeDrv()
    ctx = gpu_mod.push_primary_context(drv, 0)
    errors = []

    def other():
        try:
            ctx.pop()
        except RuntimeFault as e:
            errors.append(str(e))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors and errors[0].startswith("a pushed CUDA context must be popped on the thread "
                                           "that pushed it")
    assert ctx.pushed and len(drv.stack) == 1
    ctx.pop()
    assert drv.stack == []


def test_gpu_close_pops_even_when_closing_communication_fails():
    drv = FakeDrv()
    gpu = object.__new__(gpu_mod.Gpu)  # no device here: only what close() reads
    gpu.context = gpu_mod.push_primary_context(drv, 0)

    class Comm:
        def close(self):
            raise RuntimeError("MPI_Finalize failed")

    gpu.comm = Comm()
    with pytest.raises(RuntimeError, match="MPI_Finalize"):
        gpu.close()
    assert drv.stack == []


def test_the_torch_bridge_pops_on_close_and_after_a_failed_construction(monkeypatch):
    """TorchGpu over a fake torch (CUDA 'present', a process group 'initialised'): a failure
    after the push (here: the NCCL setup) leaves nothing pushed; close() pops."""
    from types import SimpleNamespace

    from workbench.runtime import torch_bridge

    drv = FakeDrv()
    drv.init = lambda: None
    fake_torch = SimpleNamespace(
        cuda=SimpleNamespace(is_available=lambda: True, current_device=lambda: 0),
        empty=lambda *a, **k: None)
    fake_dist = SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                get_world_size=lambda group: 1, get_rank=lambda group: 0)
    import sys

    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", fake_dist)
    fake_torch.distributed = fake_dist
    monkeypatch.setattr(torch_bridge, "import_pycuda", lambda: drv)

    def broken(choice):
        raise RuntimeFault("nccl4py must import, got a broken install")

    monkeypatch.setattr(torch_bridge.comm_mod, "_import_nccl4py", broken)
    with pytest.raises(RuntimeFault, match="broken install"):
        torch_bridge.TorchGpu()
    assert drv.stack == []

    monkeypatch.setattr(torch_bridge.TorchGpu, "_connect", lambda self, *a: None)
    bridge = torch_bridge.TorchGpu()
    assert len(drv.stack) == 1
    bridge.close()
    bridge.close()
    assert drv.stack == []
