"""How a bucket takes its gradients before it runs (wbtorch.bucket_run.BucketRun.take_grads,
design note 93), on the CPU with the device faked: new gradient tensors (.grad was None) are
copied into the bucket, all of a bucket's at once at P = 1, divided by P as they are copied at
P > 1; gradients accumulated in the bucket are divided where they are; a missing one is zero;
.grad views the bucket afterwards. The hooks of the optimizer in backward do no torch work."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import test_optimizer_cpu as base  # noqa: E402
from conftest import ROOT  # noqa: E402

from wbtorch import optim as wopt  # noqa: E402


def _opt(monkeypatch, P, overlap=False):
    class Gpu(base.FakeGpu):
        pass

    Gpu.P = P
    monkeypatch.setattr(wopt, "_make_gpu", lambda group: Gpu())
    monkeypatch.setattr(wopt, "_GPUS", {})
    monkeypatch.setattr(wopt, "_bind", base.FakeBound)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Linear(6, 2))
    opt = wopt.DataParallelOptimizer(net.parameters(), str(ROOT / "studies/adam.py"),
                                     "fuse-rs-c-ag", bucket_bytes=4 * 1000, overlap=overlap,
                                     log=lambda line: None, **base.ADAM)
    assert len(opt.runs) == 1 and len(opt.runs[0].bucket.slots) == 4
    return net, opt


def _grads(net, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(p.shape, generator=gen) for p in net.parameters()]


@pytest.mark.parametrize("P", [1, 2])
def test_new_gradients_are_copied_in_and_averaged(monkeypatch, P):
    net, opt = _opt(monkeypatch, P)
    run, params = opt.runs[0], list(net.parameters())
    grads = _grads(net)
    for p, g in zip(params, grads):
        p.grad = g.clone()
    params[3].grad = None  # no gradient: zero in the bucket
    run.g.fill_(7.0)  # stale values the intake must overwrite
    run.take_grads(opt.params, opt._slot_grad)
    for i, (p, g) in enumerate(zip(params, grads)):
        assert p.grad is opt._slot_grad[i]
        want = torch.zeros_like(g) if i == 3 else g / P
        assert torch.allclose(p.grad, want, rtol=0, atol=1e-7)


def test_gradients_accumulated_in_the_bucket_are_averaged_in_place(monkeypatch):
    net, opt = _opt(monkeypatch, 2)
    run, params = opt.runs[0], list(net.parameters())
    grads = _grads(net)
    for p, g in zip(params, grads):
        p.grad.copy_(g)  # .grad is the bucket's view: backward added into it
    run.take_grads(opt.params, opt._slot_grad)
    assert all(torch.allclose(p.grad, g / 2) for p, g in zip(params, grads))
    # some in the bucket, one new: each is divided once
    for p, g in zip(params, grads):
        p.grad.copy_(g)
    params[0].grad = grads[0].clone()
    run.take_grads(opt.params, opt._slot_grad)
    assert all(torch.allclose(p.grad, g / 2) for p, g in zip(params, grads))
    assert params[0].grad is opt._slot_grad[0]


def test_hooks_only_mark_and_the_bucket_takes_its_gradients_when_it_launches(monkeypatch):
    """In backward the per-parameter hooks enqueue no torch op: the bucket's new gradients
    stay torch's tensors until its last parameter's hook launches it (one intake)."""
    net, opt = _opt(monkeypatch, 1, overlap=True)
    params = list(net.parameters())
    taken = []
    run = opt.runs[0]
    real = run.take_grads

    def spy(ps, views):
        taken.append([p.grad is views[i] for i, p in enumerate(ps)])
        real(ps, views)

    run.take_grads = spy
    opt.zero_grad()
    x = torch.randn(3, 4)
    net(x).square().sum().backward()
    assert taken == [[False] * 4]  # one intake, when every gradient had arrived as its own
    assert all(p.grad is opt._slot_grad[i] for i, p in enumerate(params))
    opt.step()
    assert len(taken) == 1
