"""Mixed precision through the data-parallel optimizer on the CPU (device faked as in
test_optimizer_cpu.py; the plan's run is the reference interpreter): fp16 gradients, fp32
master weights and moments in the optimizer, the fp16 weights the model reads written by the
same kernel (design note 83). Checked against torch's Adam on an fp32 master copy."""

from __future__ import annotations

import pytest
from conftest import ROOT

torch = pytest.importorskip("torch")

import test_optimizer_cpu as base  # noqa: E402

from wbtorch import optim as wopt  # noqa: E402
from wbtorch.programs import ProgramRoleError  # noqa: E402

fake = base.fake
MIXED = str(ROOT / "studies/adam.py:mixed")


def _half_net(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 8)).half()


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("schedule", ["unscheduled", "fuse-rs-c-ag"])
def test_fp16_model_fp32_master_equals_torch_adam_on_a_master_copy(fake, schedule, overlap):
    net = _half_net()
    params = list(net.parameters())
    master = [p.detach().float().clone().requires_grad_() for p in params]
    ref = torch.optim.Adam(master, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    opt = wopt.DataParallelOptimizer(params, MIXED, schedule, bucket_bytes=2 * 300,
                                     overlap=overlap, log=lambda line: None, **base.ADAM)
    assert all(r.low is not None and r.w.dtype == torch.float32 for r in opt.runs)
    gen = torch.Generator().manual_seed(3)
    for _ in range(4):
        loss = net(torch.randn(16, 8, generator=gen).half()).float().square().mean()
        loss.backward()
        grads = [p.grad.float().clone() for p in params]  # the fp16 gradients backward made
        opt.step()
        opt.zero_grad()
        for m, g in zip(master, grads):
            m.grad = g
        ref.step()
        for p, m in zip(params, master):
            assert p.dtype == torch.float16
            # the model's weights are the fp32 master rounded once (not an fp16 update)
            torch.testing.assert_close(p.float(), m.detach().half().float(), rtol=2e-3,
                                       atol=1e-5)
    sd = opt.state_dict()
    for i, m in enumerate(master):  # the master weights are in the checkpoint, fp32
        assert sd["state"][i]["w"].dtype == torch.float32
        torch.testing.assert_close(sd["state"][i]["w"], m.detach(), rtol=2e-5, atol=2e-6)
    for run in opt.runs:  # .data views the fp16 copy the kernel writes
        for slot in run.bucket.slots:
            assert params[slot.index].data_ptr() == run.low[slot.offset:].data_ptr()
    mem = opt.memory()
    n = sum(b.numel for b in opt.buckets)
    assert mem["weights"] == 4 * n + 2 * n and mem["grads"] == 2 * n


def test_a_checkpoint_of_a_mixed_run_restores_the_master(fake):
    net, twin = _half_net(), _half_net()
    opt = wopt.DataParallelOptimizer(list(net.parameters()), MIXED, "fuse-rs-c-ag",
                                     log=lambda line: None, **base.ADAM)
    gen = torch.Generator().manual_seed(5)
    xs = [torch.randn(16, 8, generator=gen).half() for _ in range(4)]

    def train(n, o, batch):
        for x in batch:
            n(x).float().square().mean().backward()
            o.step()
            o.zero_grad()

    train(net, opt, xs[:2])
    sd = opt.state_dict()
    twin.load_state_dict(net.state_dict())
    opt2 = wopt.DataParallelOptimizer(list(twin.parameters()), MIXED, "unscheduled",
                                      bucket_bytes=2 * 100, log=lambda line: None, **base.ADAM)
    opt2.load_state_dict(sd)
    train(net, opt, xs[2:])
    train(twin, opt2, xs[2:])
    for a, b in zip(net.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5)


def test_a_mixed_program_has_no_torch_step(fake):
    with pytest.raises(ProgramRoleError, match=r"schedule 'torch' must be a program with a "
                       r"torch step \(adam, sgd, lamb, fp32\), got program adam \(mixed "
                       r"precision\)"):
        wopt.DataParallelOptimizer(_half_net().parameters(), MIXED, "torch",
                                   log=lambda line: None, **base.ADAM)
