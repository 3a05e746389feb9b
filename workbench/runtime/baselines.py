"""The baselines a user would pick, measured in the same run as the generated code:
NCCL all_reduce followed by PyTorch's fused optimizer kernels (torch._fused_adam_, the kernel of
torch.optim.Adam(fused=True); SGD's single in-place add), and reduce-scatter + optimizer on the
slice + all-gather through NCCL. Imports torch inside functions only.
"""

from __future__ import annotations

import statistics


def _time(torch, fn, warmup: int, reps: int) -> list[float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return times


def measure(kind: str, grad_dtype: str, n: int, rank: int, P: int, warmup: int, reps: int,
            seed: int = 0) -> dict[str, list[float]]:
    """Baseline name -> this rank's times (ms) for a study kind: allreduce, sgd or adam."""
    import torch
    import torch.distributed as dist

    dev = torch.device("cuda", rank)
    gdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[grad_dtype]
    gen = torch.Generator(device=dev).manual_seed(seed + rank)
    k = n // P
    out: dict[str, list[float]] = {}
    g = torch.randn(n, device=dev, generator=gen).to(gdt)
    if kind == "allreduce":
        out["nccl all_reduce"] = _time(torch, lambda: dist.all_reduce(g), warmup, reps)
        return out
    w = torch.randn(n, device=dev, generator=gen)
    lr = 1e-3
    if kind == "sgd":
        def ar_sgd():
            dist.all_reduce(g)
            w.add_(g, alpha=-lr)  # one kernel, f16 grads promoted in place into f32 weights

        gs = torch.empty(k, device=dev, dtype=gdt)
        ws = w[rank * k:(rank + 1) * k]

        def rs_sgd_ag():
            dist.reduce_scatter_tensor(gs, g)
            ws.add_(gs, alpha=-lr)
            dist.all_gather_into_tensor(w, ws)

        out["nccl all_reduce + torch sgd (w.add_)"] = _time(torch, ar_sgd, warmup, reps)
        out["nccl reduce_scatter + torch sgd + all_gather"] = _time(torch, rs_sgd_ag, warmup,
                                                                     reps)
        return out
    if kind != "adam":
        return out
    m = torch.zeros(n, device=dev)
    v = torch.zeros(n, device=dev)
    step = torch.tensor(1.0, device=dev)
    g32 = g if gdt == torch.float32 else torch.empty(n, device=dev)
    w16 = None if gdt == torch.float32 else torch.empty(n, device=dev, dtype=gdt)

    def adam(ws, gs, ms, vs):
        torch._fused_adam_([ws], [gs], [ms], [vs], [], [step], lr=lr, beta1=0.9, beta2=0.999,
                           weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)

    def ar_adam():
        dist.all_reduce(g)
        if w16 is not None:
            g32.copy_(g)  # fp16 grads -> fp32 master grads (what AMP with master weights does)
        adam(w, g32, m, v)
        if w16 is not None:
            w16.copy_(w)  # the fp16 weights of the next forward pass

    gs = torch.empty(k, device=dev, dtype=gdt)
    gs32 = gs if gdt == torch.float32 else torch.empty(k, device=dev)
    ws, ms, vs = (x[rank * k:(rank + 1) * k] for x in (w, m, v))
    w16s = None if w16 is None else w16[rank * k:(rank + 1) * k]

    def rs_adam_ag():
        dist.reduce_scatter_tensor(gs, g)
        if w16 is not None:
            gs32.copy_(gs)
        adam(ws, gs32, ms, vs)
        if w16 is None:
            dist.all_gather_into_tensor(w, ws)
        else:
            w16s.copy_(ws)
            dist.all_gather_into_tensor(w16, w16s)

    out["nccl all_reduce + torch._fused_adam_"] = _time(torch, ar_adam, warmup, reps)
    out["nccl reduce_scatter + torch._fused_adam_ + all_gather"] = _time(torch, rs_adam_ag,
                                                                          warmup, reps)
    return out


def median(xs) -> float:
    return statistics.median(xs)
