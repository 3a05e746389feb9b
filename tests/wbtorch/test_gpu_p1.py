"""The P = 1 paths of design notes 82-83 on one real GPU (marked gpu; skipped without one):
buckets that read torch's .grad tensors in place (rebound plans, relocated arguments) train
like torch's fused AdamW, in backward too; a bf16 model with fp32 master weights in the fused
kernel trains like torch's fused AdamW on an fp32 master copy."""

from __future__ import annotations

import pytest
from conftest import ROOT
from test_gpu_optimizer import _group, _models, _release, _train  # noqa: F401  (fixture)

ADAM = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8)


@pytest.mark.gpu
@pytest.mark.parametrize("overlap", [False, True])
def test_lent_gradients_train_like_torch(monkeypatch, overlap):
    torch = pytest.importorskip("torch")
    _group()
    from wbtorch import optim as wopt

    monkeypatch.setattr(wopt, "LEND_ALONE_BYTES", 4 * 2048)  # the 19200-element weight
    net, twin = _models(torch)
    ref = torch.optim.AdamW(twin.parameters(), lr=1e-3, weight_decay=0.0, fused=True)
    opt = wopt.DataParallelOptimizer(net.parameters(), str(ROOT / "studies/adam.py"),
                                     "fuse-rs-c-ag", overlap=overlap, **ADAM)
    assert any(r.lends for r in opt.runs)
    _train(torch, net, opt, steps=6)
    _train(torch, twin, ref, steps=6)
    assert opt.rebinds >= 1
    for a, b in zip(net.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_bf16_parameters_with_an_fp32_master_train_like_torch():
    torch = pytest.importorskip("torch")
    _group()
    import wbtorch

    net, twin = _models(torch)
    net, twin = net.to(torch.bfloat16), twin.to(torch.bfloat16)
    params, tparams = list(net.parameters()), list(twin.parameters())
    master = [p.detach().float().clone().requires_grad_() for p in tparams]
    ref = torch.optim.AdamW(master, lr=1e-3, weight_decay=0.0, fused=True)
    opt = wbtorch.DataParallelOptimizer(params, str(ROOT / "examples/adam_bf16.py"),
                                        "fuse-rs-c-ag", bucket_bytes=2 * 20000, **ADAM)
    gen = torch.Generator(device="cuda").manual_seed(1)

    def close(atol):
        sd = opt.state_dict()
        for i, (p, m) in enumerate(zip(params, master)):
            assert p.dtype == torch.bfloat16
            torch.testing.assert_close(sd["state"][i]["w"].cuda(), m.detach(), rtol=1e-4,
                                       atol=atol)
            # the model's weights are the master rounded to bf16 once
            torch.testing.assert_close(p.float(), sd["state"][i]["w"].cuda().bfloat16().float())

    for step in range(5):
        x = torch.randn(32, 64, device="cuda", generator=gen, dtype=torch.bfloat16)
        net(x).float().square().mean().backward()
        twin(x).float().square().mean().backward()
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            for p, m in zip(tparams, master):
                m.grad = p.grad.float()
            ref.step()
            for p, m in zip(tparams, master):
                p.copy_(m)
                p.grad = None
        # the first step sees the same gradients: the masters agree up to the formulas'
        # rounding; later steps' bf16 forwards may round a weight differently (<= lr a step)
        close(1e-6 if step == 0 else 2e-3 * step)
