"""Baselines of AllReduce + residual + RMSNorm (studies/allreduce_rmsnorm.py; issue 25): what
an inference or training engine runs instead of the fused kernel, in the same run.

- NCCL all_reduce, then residual + RMSNorm as eager torch ops;
- NCCL all_reduce, then the epilogue under torch.compile(fullgraph=True) (Inductor makes one
  row kernel of it), launched eagerly and captured in a CUDA graph and replayed (what an
  engine does at small token counts, where host launch time would dominate);
- torch's symmetric-memory all-reduce (torch.ops.symm_mem.one_shot_all_reduce and
  two_shot_all_reduce_, TensorRT-LLM-style NVLink kernels) + the compiled epilogue, eager and
  graphed, where this torch build and dtype support them (one-shot has no float16 kernel in
  torch 2.11: left out, with why on the log).

The epilogue computes what the program does: h = summed + r in the dtype, out = h * rsqrt(
mean(h^2) + eps) * g with the statistic in f32, rounded to the dtype. Imports torch inside
functions only (the runtime's rule).
"""

from __future__ import annotations

from workbench.runtime.baselines import event_times, restorer

EPS = 1e-6  # studies/allreduce_rmsnorm.py's


def _epilogue(torch, eps: float):
    def epilogue(s, r, g):
        h = s + r
        hf = h.float()
        out = hf * torch.rsqrt((hf * hf).mean(-1, keepdim=True) + eps) * g.float()
        return out.to(h.dtype), h

    return epilogue


def _graphed(torch, step, before, warmup: int):
    """`step` captured once in a CUDA graph after warm-up on a side stream; its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(max(3, warmup)):
            before()
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    before()
    with torch.cuda.graph(graph):
        step()
    torch.cuda.synchronize()
    return graph.replay


def _try(out: dict, name: str, fn) -> None:
    """out[name] = fn(), or the row left out with why on the log (a torch build or machine
    without the feature); the other baselines stand."""
    try:
        out[name] = fn()
    except Exception as e:  # torch raises many kinds; say which and go on
        print(f"{name} left out: {type(e).__name__}: {str(e)[:300]}", flush=True)


def measure_study(kind: str, grad_dtype: str, sizes: dict, rank: int, P: int, warmup: int,
                  reps: int, seed: int = 0) -> dict[str, list[float]]:
    """baselines.measure for the study kind "allreduce_rmsnorm" (the same signature, so the
    worker picks one or the other by kind): sizes["T"] tokens, sizes["H"] hidden."""
    import torch
    import torch.distributed as dist

    if kind != "allreduce_rmsnorm":
        raise ValueError(f"kind must be allreduce_rmsnorm, got {kind!r}")
    dev = torch.device("cuda", rank)
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[grad_dtype]
    gen = torch.Generator(device=dev).manual_seed(seed + rank)
    return measure(torch, dist, sizes["T"], sizes["H"], dtype, gen, P, warmup, reps)


def measure(torch, dist, T: int, H: int, dtype, gen, P: int, warmup: int, reps: int,
            eps: float = EPS) -> dict[str, list[float]]:
    """Baseline name -> this rank's times (ms) of AllReduce + residual + RMSNorm on [T, H]."""
    dev = gen.device
    y = torch.randn(T, H, device=dev, generator=gen).to(dtype)
    r = torch.randn(T, H, device=dev, generator=gen).to(dtype)
    g = torch.randn(H, device=dev, generator=gen).to(dtype)
    before = restorer(y)  # the in-place all_reduce sums y P-fold every run
    epilogue = _epilogue(torch, eps)
    out: dict[str, list[float]] = {}

    def eager():
        dist.all_reduce(y)
        return epilogue(y, r, g)

    out["nccl all_reduce + torch epilogue"] = event_times(torch, eager, warmup, reps, before)
    torch._dynamo.reset()  # a fresh cache per size: no silent fallback to eager (baselines.py)
    compiled = torch.compile(epilogue, dynamic=False, fullgraph=True)
    try:
        before()
        compiled(y, r, g)  # the compile, untimed
        torch.cuda.synchronize()
    except Exception as e:
        print(f"torch.compile epilogue left out: {type(e).__name__}: {str(e)[:300]}",
              flush=True)
        return out

    def nccl_compiled():
        dist.all_reduce(y)
        return compiled(y, r, g)

    out["nccl all_reduce + torch.compile epilogue"] = event_times(torch, nccl_compiled, warmup,
                                                                  reps, before)
    _try(out, "nccl all_reduce + torch.compile epilogue, cuda graph", lambda: event_times(
        torch, _graphed(torch, nccl_compiled, before, warmup), warmup, reps, before))
    _try(out, "torch.compile epilogue alone (no all_reduce), cuda graph", lambda: event_times(
        torch, _graphed(torch, lambda: compiled(y, r, g), before, warmup), warmup, reps))
    out.update(_symmetric_memory(torch, dist, y, r, g, compiled, warmup, reps))
    return out


def _symmetric_memory(torch, dist, y, r, g, compiled, warmup: int, reps: int) -> dict:
    """torch's symmetric-memory one-shot and two-shot all-reduce + the compiled epilogue."""
    try:
        from torch.distributed import _symmetric_memory as symm

        name = dist.group.WORLD.group_name
        buf = symm.empty(tuple(y.shape), dtype=y.dtype, device=y.device)
        symm.rendezvous(buf, name)
        buf.copy_(y)
    except Exception as e:
        print(f"symmetric-memory baselines left out: {type(e).__name__}: {str(e)[:300]}",
              flush=True)
        return {}
    out: dict[str, list[float]] = {}
    before = restorer(buf)

    def one_shot():
        return compiled(torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", name), r, g)

    def two_shot():
        torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", name)
        return compiled(buf, r, g)

    for label, step in (("one_shot_all_reduce", one_shot), ("two_shot_all_reduce_", two_shot)):
        base = f"symm_mem {label} + torch.compile epilogue"
        _try(out, base, lambda s=step: event_times(torch, s, warmup, reps, before))
        if base in out:
            _try(out, f"{base}, cuda graph", lambda s=step: event_times(
                torch, _graphed(torch, s, before, warmup), warmup, reps, before))
    return out
