"""The baselines a user would pick, measured in the same run as the generated code:
NCCL all_reduce followed by PyTorch's fused optimizer kernels (torch._fused_adam_, the kernel of
torch.optim.Adam(fused=True); SGD's single in-place add), and reduce-scatter + optimizer on the
slice + all-gather through NCCL; and, beside each, the same step under `torch.compile` (what
many users run today: Inductor fuses the update into one kernel), NCCL all_reduce + the compiled
step (design note 54). Compiled once per size (dynamic=False, as for a model of fixed
parameters), the compile outside the timed runs. Imports torch inside functions only.
"""

from __future__ import annotations

import statistics

# Rows measured beside the baselines that do not compute what the program computes (a floor:
# the MatMul alone, without the all_reduce and the epilogue). They are kept as kind
# "reference", never a candidate for the fastest baseline (GPU run 22 had the MatMul alone as
# the model-parallel layer's "fastest baseline" at P = 1).
REFERENCES = frozenset({"cublas matmul alone",
                        "torch.compile epilogue alone (no all_reduce), cuda graph"})


def row_kind(name: str) -> str:
    """The results' kind of a row that `measure` returned: 'reference' or 'baseline'."""
    return "reference" if name in REFERENCES else "baseline"


def event_times(torch, fn, warmup: int, reps: int, before=None) -> list[float]:
    """Per-repetition times (ms) of fn() between CUDA events, after `warmup` untimed calls;
    `before()` (untimed, enqueued ahead of each call) puts back what fn overwrites."""
    for _ in range(warmup):
        if before is not None:
            before()
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if before is not None:
            before()
            torch.cuda.synchronize()  # the GPU idle at the start, as when nothing is restored
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return times


def restorer(*tensors):
    """A `before` for event_times: copies the tensors' current values back into them on the
    device. What a step overwrites in place (the gradients an in-place all_reduce sums, an
    optimizer's state) must be the same at every repetition, as in the generated code
    (PlanRun.restore_inputs): summed in place P-fold every repetition, f16 gradients
    overflow after ~16 and the update then computes on Inf and NaN."""
    saved = [(t, t.clone()) for t in tensors]

    def before():
        for t, copy in saved:
            t.copy_(copy)

    return before


def compiled(torch, fn):
    """`fn` under torch.compile (fixed shapes), or None where compiling fails here (no
    compiler toolchain): the run goes on without the compiled baseline and says why."""
    try:
        # A fresh cache: the steps' code objects are the same at every size and program, and
        # Dynamo falls back to eager, silently, once one has been recompiled
        # recompile_limit (8) times; a sweep of sizes and dtypes would then time eager code.
        torch._dynamo.reset()
        return torch.compile(fn, dynamic=False)
    except Exception as e:  # torch.compile raises many kinds; the eager baselines stand
        print(f"torch.compile baseline left out: {type(e).__name__}: {e}", flush=True)
        return None


def _timed_compiled(torch, out: dict, name: str, fn, args, warmup: int, reps: int,
                    before=None) -> None:
    """Compile `fn`, run it once (the compile), then time `step()` = NCCL part + it."""
    c = compiled(torch, fn)
    if c is None:
        return
    try:
        if before is not None:
            before()
        c(*args)  # the compile, untimed
        torch.cuda.synchronize()
    except Exception as e:
        print(f"{name} left out: {type(e).__name__}: {str(e)[:300]}", flush=True)
        return
    out[name] = c


def measure(kind: str, grad_dtype: str, sizes: dict, rank: int, P: int, warmup: int,
            reps: int, seed: int = 0) -> dict[str, list[float]]:
    """Baseline name -> this rank's times (ms) for a study kind: allreduce, sgd, adam, lamb
    (sizes["N"] elements), model_parallel or pipeline (sizes["T"] tokens, sizes["H"] hidden;
    a pipeline's `rank` is global and P counts the ranks of one stage), sequence_parallel or
    moe (also sizes["F"], the FFN size)."""
    import torch
    import torch.distributed as dist

    dev = torch.device("cuda", rank)
    gdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[grad_dtype]
    gen = torch.Generator(device=dev).manual_seed(seed + rank)
    if kind == "model_parallel":
        return _model_parallel(torch, dist, sizes["T"], sizes["H"], gdt, gen, rank, P, warmup,
                               reps)
    if kind == "pipeline":
        return _pipeline(torch, dist, sizes["T"], sizes["H"], gdt, gen, rank, P, warmup, reps)
    if kind == "sequence_parallel":
        return _sequence_parallel(torch, dist, sizes["T"], sizes["H"], sizes["F"], gdt, gen, P,
                                  warmup, reps)
    if kind == "moe":
        return _moe(torch, dist, sizes["T"], sizes["H"], sizes["F"], gdt, gen, P, warmup, reps)
    n = sizes["N"]
    k = n // P
    out: dict[str, list[float]] = {}
    g = torch.randn(n, device=dev, generator=gen).to(gdt)
    if kind == "allreduce":
        out["nccl all_reduce"] = event_times(torch, lambda: dist.all_reduce(g), warmup, reps,
                                             restorer(g))
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

        before = restorer(g, w)
        out["nccl all_reduce + torch sgd (w.add_)"] = event_times(torch, ar_sgd, warmup, reps,
                                                                  before)

        def sgd_step(g_, w_):
            w_.sub_(lr * g_.float())

        fns: dict = {}
        _timed_compiled(torch, fns, "c", sgd_step, (g, w), warmup, reps, before)
        if "c" in fns:
            def ar_sgd_c():
                dist.all_reduce(g)
                fns["c"](g, w)

            out["nccl all_reduce + torch.compile sgd"] = event_times(torch, ar_sgd_c, warmup,
                                                                     reps, before)
        out["nccl reduce_scatter + torch sgd + all_gather"] = event_times(torch, rs_sgd_ag, warmup,
                                                                     reps, before)
        return out
    if kind == "lamb":
        out.update(_lamb(torch, dist, g, w, gdt, rank, P, warmup, reps))
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

    before = restorer(g, w, m, v)
    out["nccl all_reduce + torch._fused_adam_"] = event_times(torch, ar_adam, warmup, reps,
                                                              before)
    b1, b2, eps = 0.9, 0.999, 1e-8

    def adam_step(g_, w_, m_, v_, w16_):
        # torch.optim.Adam's update at step 1, in torch ops: Inductor makes one kernel of it
        g_ = g_.float()
        m_.mul_(b1).add_(g_, alpha=1 - b1)
        v_.mul_(b2).addcmul_(g_, g_, value=1 - b2)
        w_.sub_(lr * (m_ / (1 - b1)) / ((v_ / (1 - b2)).sqrt() + eps))
        if w16_ is not None:
            w16_.copy_(w_)

    fns = {}
    _timed_compiled(torch, fns, "c", adam_step, (g, w, m, v, w16), warmup, reps, before)
    if "c" in fns:
        def ar_adam_c():
            dist.all_reduce(g)
            fns["c"](g, w, m, v, w16)

        out["nccl all_reduce + torch.compile adam"] = event_times(torch, ar_adam_c, warmup,
                                                                  reps, before)
    out["nccl reduce_scatter + torch._fused_adam_ + all_gather"] = event_times(torch, rs_adam_ag,
                                                                          warmup, reps, before)
    return out


def median(xs) -> float:
    return statistics.median(xs)


def _lamb(torch, dist, g, w, gdt, rank: int, P: int, warmup: int, reps: int):
    """LAMB as a user writes it with torch ops (PyTorch has no fused LAMB kernel): Adam's
    moments, the update direction u, the trust ratio ||w|| / ||u|| kept on the GPU (no host
    sync), then the update; after an NCCL all_reduce, or on slices between NCCL reduce_scatter
    and all_gather with the two partial sums of squares all-reduced (one 2-element all_reduce).
    """
    dev, n = g.device, g.numel()
    k = n // P
    lr, b1, b2, eps, wd = 1e-3, 0.9, 0.999, 1e-6, 0.01
    bc1, bc2 = 1 - b1, 1 - b2  # bias corrections at step 1
    m = torch.zeros(n, device=dev)
    v = torch.zeros(n, device=dev)
    mixed = gdt != torch.float32
    g32 = torch.empty(n, device=dev) if mixed else g
    w16 = torch.empty(n, device=dev, dtype=gdt) if mixed else None

    def step(ws, gs, ms, vs, sliced: bool):
        ms.mul_(b1).add_(gs, alpha=1 - b1)
        vs.mul_(b2).addcmul_(gs, gs, value=1 - b2)
        u = (ms / bc1) / ((vs / bc2).sqrt_().add_(eps)) + wd * ws
        if sliced:
            sq = torch.stack([ws.square().sum(), u.square().sum()])
            dist.all_reduce(sq)
            norms = sq.sqrt()
            wn, un = norms[0], norms[1]
        else:
            wn, un = torch.linalg.vector_norm(ws), torch.linalg.vector_norm(u)
        ws.sub_(u * (lr * wn / un))

    def ar_lamb():
        dist.all_reduce(g)
        if mixed:
            g32.copy_(g)
        step(w, g32, m, v, sliced=False)
        if mixed:
            w16.copy_(w)

    gs = torch.empty(k, device=dev, dtype=gdt)
    gs32 = torch.empty(k, device=dev) if mixed else gs
    ws, ms, vs = (x[rank * k:(rank + 1) * k] for x in (w, m, v))

    def rs_lamb_ag():
        dist.reduce_scatter_tensor(gs, g)
        if mixed:
            gs32.copy_(gs)
        step(ws, gs32, ms, vs, sliced=True)
        if mixed:
            w16s = w16[rank * k:(rank + 1) * k]
            w16s.copy_(ws)
            dist.all_gather_into_tensor(w16, w16s)
        else:
            dist.all_gather_into_tensor(w, ws)

    before = restorer(g, w, m, v)
    out = {"nccl all_reduce + torch lamb": event_times(torch, ar_lamb, warmup, reps, before),
           "nccl reduce_scatter + torch lamb + all_gather": event_times(torch, rs_lamb_ag, warmup,
                                                                   reps, before)}

    def lamb_step(g_, w_, m_, v_, w16_):
        g_ = g_.float()
        m_.mul_(b1).add_(g_, alpha=1 - b1)
        v_.mul_(b2).addcmul_(g_, g_, value=1 - b2)
        u = (m_ / bc1) / ((v_ / bc2).sqrt() + eps) + wd * w_
        w_.sub_(u * (lr * torch.linalg.vector_norm(w_) / torch.linalg.vector_norm(u)))
        if w16_ is not None:
            w16_.copy_(w_)

    fns: dict = {}
    _timed_compiled(torch, fns, "c", lamb_step, (g, w, m, v, w16), warmup, reps, before)
    if "c" in fns:
        def ar_lamb_c():
            dist.all_reduce(g)
            fns["c"](g, w, m, v, w16)

        out["nccl all_reduce + torch.compile lamb"] = event_times(torch, ar_lamb_c, warmup,
                                                                  reps, before)
    return out


def _model_parallel(torch, dist, T: int, H: int, dtype, gen, rank: int, P: int, warmup: int,
                    reps: int):
    """The Megatron row-parallel layer as PyTorch runs it: cuBLAS MatMul of the local column
    slice of x with the local row slice of W, NCCL all_reduce of the partial sums, then the
    epilogue as eager ops (bias add, dropout, residual add: one kernel each)."""
    dev = gen.device
    x = torch.randn(T, H // P, device=dev, generator=gen).to(dtype)
    W = (torch.randn(H // P, H, device=dev, generator=gen) / H ** 0.5).to(dtype)
    b = torch.randn(H, device=dev, generator=gen).to(dtype)
    r = torch.randn(T, H, device=dev, generator=gen).to(dtype)
    y = torch.empty(T, H, device=dev, dtype=dtype)

    def layer():
        torch.matmul(x, W, out=y)
        dist.all_reduce(y)
        return torch.nn.functional.dropout(y + b, 0.1, training=True) + r

    def matmul_only():
        torch.matmul(x, W, out=y)

    out = {"cublas matmul + nccl all_reduce + torch epilogue": event_times(torch, layer, warmup,
                                                                          reps),
           "cublas matmul alone": event_times(torch, matmul_only, warmup, reps)}

    def epilogue(y_, b_, r_):
        return torch.nn.functional.dropout(y_ + b_, 0.1, training=True) + r_

    fns: dict = {}
    _timed_compiled(torch, fns, "c", epilogue, (y, b, r), warmup, reps)
    if "c" in fns:
        def layer_c():
            torch.matmul(x, W, out=y)
            dist.all_reduce(y)
            return fns["c"](y, b, r)

        out["cublas matmul + nccl all_reduce + torch.compile epilogue"] = event_times(
            torch, layer_c, warmup, reps)
    out.update(_symm_mem(torch, dist, x, W, b, r, P, warmup, reps))
    return out


def _symm_mem(torch, dist, x, W, b, r, P: int, warmup: int, reps: int) -> dict:
    """PyTorch's own fused communication for the tensor-parallel MatMul (async-TP, symmetric
    memory): fused_matmul_reduce_scatter (each rank's rows of x @ W summed over the group),
    then the epilogue on the rows and an all_gather of the layer's output; P > 1 only. Left
    out, with why on the log, where this torch build or machine has no symmetric memory."""
    if P < 2:
        return {}
    try:
        from torch.distributed import _symmetric_memory as symm

        group = dist.group.WORLD
        symm.enable_symm_mem_for_group(group.group_name)
        T, H = x.shape[0], W.shape[1]
        k = T // P
        rows = slice(dist.get_rank() * k, (dist.get_rank() + 1) * k)
        full = torch.empty(T, H, device=x.device, dtype=x.dtype)

        def layer():
            part = torch.ops.symm_mem.fused_matmul_reduce_scatter(x, W, "sum", 0,
                                                                  group.group_name)
            ys = torch.nn.functional.dropout(part + b, 0.1, training=True) + r[rows]
            dist.all_gather_into_tensor(full, ys.contiguous())

        return {"symm_mem fused_matmul_reduce_scatter + torch epilogue + all_gather":
                event_times(torch, layer, warmup, reps)}
    except Exception as e:
        print(f"symmetric-memory baseline left out: {type(e).__name__}: {str(e)[:300]}",
              flush=True)
        return {}


def _sequence_parallel(torch, dist, T: int, H: int, F: int, dtype, gen, P: int, warmup: int,
                       reps: int) -> dict:
    """Megatron's sequence-parallel MLP as PyTorch runs it (studies/sequence_parallel.py):
    NCCL all_gather of the token rows, cuBLAS MatMul with the column slice of W1, GeLU, MatMul
    with the row slice of W2, NCCL reduce_scatter of the partial sums, residual add; and with
    P > 1 torch's async-TP ops, symmetric memory's fused_all_gather_matmul and
    fused_matmul_reduce_scatter, in place of the collectives and MatMuls."""
    dev = gen.device
    x = torch.randn(T // P, H, device=dev, generator=gen).to(dtype)
    W1 = (torch.randn(H, F // P, device=dev, generator=gen) / H ** 0.5).to(dtype)
    W2 = (torch.randn(F // P, H, device=dev, generator=gen) / F ** 0.5).to(dtype)
    r = torch.randn(T // P, H, device=dev, generator=gen).to(dtype)
    xg = torch.empty(T, H, device=dev, dtype=dtype)
    ys = torch.empty(T // P, H, device=dev, dtype=dtype)
    gelu = torch.nn.functional.gelu

    def layer():
        dist.all_gather_into_tensor(xg, x)
        y = torch.matmul(gelu(torch.matmul(xg, W1)), W2)
        dist.reduce_scatter_tensor(ys, y)
        return ys + r

    out = {"nccl all_gather + cublas + torch gelu + nccl reduce_scatter": event_times(
        torch, layer, warmup, reps)}
    fns: dict = {}
    _timed_compiled(torch, fns, "gelu", gelu, (torch.matmul(xg, W1),), warmup, reps)
    if "gelu" in fns:
        def layer_c():
            dist.all_gather_into_tensor(xg, x)
            y = torch.matmul(fns["gelu"](torch.matmul(xg, W1)), W2)
            dist.reduce_scatter_tensor(ys, y)
            return ys + r

        out["nccl all_gather + cublas + torch.compile gelu + nccl reduce_scatter"] = \
            event_times(torch, layer_c, warmup, reps)
    if P < 2:
        return out
    try:
        from torch.distributed import _symmetric_memory as symm

        group = dist.group.WORLD
        symm.enable_symm_mem_for_group(group.group_name)

        def layer_symm():
            _, (h,) = torch.ops.symm_mem.fused_all_gather_matmul(x, [W1], 0, group.group_name)
            part = torch.ops.symm_mem.fused_matmul_reduce_scatter(gelu(h), W2, "sum", 0,
                                                                  group.group_name)
            return part + r

        out["symm_mem fused_all_gather_matmul + fused_matmul_reduce_scatter"] = event_times(
            torch, layer_symm, warmup, reps)
    except Exception as e:
        print(f"symmetric-memory baseline left out: {type(e).__name__}: {str(e)[:300]}",
              flush=True)
    return out


def _moe(torch, dist, T: int, H: int, F: int, dtype, gen, P: int, warmup: int,
         reps: int) -> dict:
    """The MoE expert layer as PyTorch runs it (studies/moe.py): NCCL all_to_all_single of the
    tokens grouped by expert, the expert's SwiGLU MLP (three cuBLAS MatMuls, eager or
    torch.compile'd SiLU * gate), all_to_all_single back, the router's gate weights."""
    dev = gen.device
    x = torch.randn(T, H, device=dev, generator=gen).to(dtype)
    gate = torch.rand(T, 1, device=dev, generator=gen).to(dtype)
    W1 = (torch.randn(H, F, device=dev, generator=gen) / H ** 0.5).to(dtype)
    W3 = (torch.randn(H, F, device=dev, generator=gen) / H ** 0.5).to(dtype)
    W2 = (torch.randn(F, H, device=dev, generator=gen) / F ** 0.5).to(dtype)
    d, back = torch.empty_like(x), torch.empty_like(x)

    def swiglu(a, b):
        return torch.nn.functional.silu(a) * b

    def layer(act=swiglu):
        dist.all_to_all_single(d, x)
        y = torch.matmul(act(torch.matmul(d, W1), torch.matmul(d, W3)), W2)
        dist.all_to_all_single(back, y)
        return back * gate

    out = {"nccl all_to_all + cublas + torch swiglu": event_times(torch, layer, warmup, reps)}
    fns: dict = {}
    h = torch.matmul(x, W1)
    _timed_compiled(torch, fns, "swiglu", swiglu, (h, h), warmup, reps)
    if "swiglu" in fns:
        out["nccl all_to_all + cublas + torch.compile swiglu"] = event_times(
            torch, lambda: layer(fns["swiglu"]), warmup, reps)
    return out


# torch process groups of the pipeline's stages, per (world size, ranks per stage): every rank
# creates every group once, in the same order (torch.distributed.new_group is collective).
_STAGE_GROUPS: dict[tuple[int, int], list] = {}


def stage_groups(dist, P: int) -> list:
    """The torch process group of each stage of P consecutive ranks (stage-major)."""
    world = dist.get_world_size()
    key = (world, P)
    if key not in _STAGE_GROUPS:
        _STAGE_GROUPS[key] = [dist.new_group(list(range(k * P, (k + 1) * P)))
                              for k in range(world // P)]
    return _STAGE_GROUPS[key]


def _pipeline(torch, dist, T: int, H: int, dtype, gen, rank: int, P: int, warmup: int,
              reps: int):
    """The pipeline step as PyTorch runs it on two stages of P ranks: stage 0 all-reduces the
    partial sums within the stage (NCCL), runs the epilogue as eager ops (bias add, dropout,
    residual add) and sends the activations to the same rank of stage 1 (NCCL send/recv);
    and the sliced form (reduce_scatter, epilogue on the slice, send the slice, all_gather on
    stage 1). Each rank times its own side."""
    dev = gen.device
    stage, local = divmod(rank, P)
    groups = stage_groups(dist, P)
    group = groups[stage]
    k = T // P
    y = torch.randn(T, H, device=dev, generator=gen).to(dtype)
    b = torch.randn(H, device=dev, generator=gen).to(dtype)
    r = torch.randn(T, H, device=dev, generator=gen).to(dtype)
    out = torch.empty(T, H, device=dev, dtype=dtype)
    ys = torch.empty(k, H, device=dev, dtype=dtype)
    outs = torch.empty(k, H, device=dev, dtype=dtype)
    peer = rank + P if stage == 0 else rank - P

    def epilogue(x, rows):
        return torch.nn.functional.dropout(x + b, 0.1, training=True) + r[rows]

    def step():
        if stage == 0:
            dist.all_reduce(y, group=group)
            dist.send(epilogue(y, slice(None)).contiguous(), peer)
        else:
            dist.recv(out, peer)

    def sliced():
        if stage == 0:
            dist.reduce_scatter_tensor(ys, y, group=group)
            dist.send(epilogue(ys, slice(local * k, (local + 1) * k)).contiguous(), peer)
        else:
            dist.recv(outs, peer)
            dist.all_gather_into_tensor(out, outs, group=group)

    before = restorer(y)  # stage 0's all_reduce sums the partial sums in place
    out_ = {"nccl all_reduce + torch epilogue + nccl send/recv": event_times(torch, step, warmup,
                                                                            reps, before),
            "nccl reduce_scatter + torch epilogue + send/recv + all_gather": event_times(
                torch, sliced, warmup, reps, before)}

    def epi(x_, b_, r_):
        return torch.nn.functional.dropout(x_ + b_, 0.1, training=True) + r_

    fns: dict = {}
    if stage == 0:
        _timed_compiled(torch, fns, "c", epi, (y, b, r), warmup, reps, before)
    # every rank of both stages must time the same baselines (send/recv pair up)
    have = torch.tensor([int("c" in fns or stage == 1)], device=dev)
    dist.all_reduce(have, op=dist.ReduceOp.MIN)
    if int(have):
        def step_c():
            if stage == 0:
                dist.all_reduce(y, group=group)
                dist.send(fns["c"](y, b, r).contiguous(), peer)
            else:
                dist.recv(out, peer)

        out_["nccl all_reduce + torch.compile epilogue + nccl send/recv"] = event_times(
            torch, step_c, warmup, reps, before)
    return out_
