"""A small GPT trained data-parallel under torchrun, with the optimizer step done by torch or
by the workbench's generated kernels (design notes 53, 63, 64).

    torchrun --nproc_per_node=1 examples/train_gpt.py --optimizer torch --out a.json
    torchrun --nproc_per_node=1 examples/train_gpt.py --optimizer torch --bucket-mb 5 --out n.json
    torchrun --nproc_per_node=1 examples/train_gpt.py --optimizer workbench --overlap \
        --compile-scope blocks --out b.json
    python examples/compare_losses.py a.json b.json --noise n.json

--optimizer torch: torch DDP + AdamW(fused=True, weight_decay=0), the model under torch.compile
  (--no-compile to run eager); --no-ddp: the plain model, no DDP wrapper (world size 1 only:
  the fastest torch baseline there).
--optimizer workbench: the same model (no DDP wrapper) and wbtorch.DataParallelOptimizer over
  studies/adam.py (--program, --schedule auto|NAME): each gradient bucket's AllReduce + Adam
  update is one generated kernel of the chosen schedule; --overlap launches each bucket's
  kernel from backward, on a side stream, as soon as its gradients are accumulated; --zero
  keeps the Adam state sliced over the ranks (ZeRO-1).
--compile-scope model|blocks|split: torch.compile the whole model, or each transformer block
  (the blocks share one compiled graph; backward then has one autograd node per block, which is
  what lets --overlap launch buckets while backward runs: a whole-model graph hands every
  gradient over at its end), or the whole model traced once and its graph split where the
  parameters reach --split-mb (default: one block's bytes), each piece compiled by inductor
  (torch's DDPOptimizer, which DDP's compile uses, as a backend: one guard check a step, not
  one a block, and still one autograd node per piece; design note 94).
--optimizer workbench --tp: also each block's attention projection + residual add as a
  wbtorch.RowParallelLinear (its forward a schedule of examples/tp_layer.py) over the world.

Both read the same character-level tokens (examples/data/tiny.txt, shipped) in the same order,
so losses agree step by step up to rounding (compare_losses.py judges them against torch's own
run-to-run noise). Writes per-step losses, and the median time of each phase of a step
(CUDA events on torch's stream: forward, backward, optimizer: for DDP the AllReduce runs
inside backward; with --overlap the optimizer phase is what backward left exposed), the host's
time per step, and the memory the optimizer holds per rank. Needs a CUDA GPU and torch
(`pip install torch`; the workbench's side also pycuda: `pip install -e '.[gpu]'`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from anywhere: the repo's packages first
    sys.path.insert(0, str(ROOT))


def parse(argv=None):
    """The script's options (parser())."""
    return parser().parse_args(argv)


def parser() -> argparse.ArgumentParser:
    """The script's options. None is a prefix of a torchrun option (torchrun's own parser
    reads every argument and stops at an ambiguous prefix: `--d` matched its
    --duplicate-*-filters), so the README's `torchrun ... train_gpt.py OPTIONS` works."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--optimizer", choices=["torch", "workbench"], required=True)
    ap.add_argument("--no-ddp", dest="ddp", action="store_false",
                    help="(torch) the plain model without the DDP wrapper (world size 1)")
    ap.add_argument("--no-optimize-ddp", dest="optimize_ddp", action="store_false",
                    help="(torch) compile DDP as one graph (torch._dynamo.config.optimize_ddp "
                         "off: no graph split per bucket, AllReduce after backward)")
    ap.add_argument("--torch-sharding", choices=["zero1", "fsdp2"], default=None,
                    help="(torch) the optimizer's state sliced over the ranks: zero1 is DDP + "
                         "torch's ZeroRedundancyOptimizer over AdamW(fused=True) (what the "
                         "workbench's --zero does); fsdp2 is fully_shard on every block and the "
                         "model (parameters, gradients and state sliced) + AdamW(fused=True)")
    ap.add_argument("--overlap", action="store_true",
                    help="(workbench) each bucket's step launched from backward")
    ap.add_argument("--zero", action="store_true",
                    help="(workbench) the optimizer state sliced over the ranks (ZeRO-1)")
    ap.add_argument("--no-lend-grads", dest="lend_grads", action="store_false",
                    help="(workbench, P = 1) copy every gradient into a flat bucket instead "
                         "of reading large parameters' .grad in place (design note 82)")
    ap.add_argument("--blocks-per-sm", type=int, choices=[1, 2], default=None,
                    help="(workbench) the fused kernels' grid per SM (default: the choice's)")
    ap.add_argument("--fused-grid", type=int, default=None,
                    help="(workbench) the fused kernels' grid in blocks at most (sets "
                         "WB_COLLECTIVE_GRID; default: blocks per SM x SMs): with --overlap a "
                         "few SMs for the optimizer leave the rest to backward (note 94)")
    ap.add_argument("--precision", choices=["fp32", "bf16", "bf16-params"], default="fp32",
                    help="bf16: autocast over fp32 parameters (torch's AMP); bf16-params: bf16 "
                         "parameters and gradients under autocast, fp32 master weights and "
                         "moments in the optimizer (torch: fused AdamW on an fp32 master copy; "
                         "workbench: examples/adam_bf16.py, one kernel)")
    ap.add_argument("--program", default=None,
                    help="(workbench) the optimizer program (default: studies/adam.py, "
                         "examples/adam_bf16.py with --precision bf16-params)")
    ap.add_argument("--schedule", default="auto")
    ap.add_argument("--choose", choices=["measure", "predict"], default="measure")
    ap.add_argument("--hardware", default=None)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup-steps", type=int, default=None,
                    help="steps left out of the medians (default: min(20, steps // 2))")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--model-dim", type=int, default=256, help="the model width (d_model)")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--compile-scope", choices=["model", "blocks", "split"], default="model")
    ap.add_argument("--cudagraphs", action="store_true",
                    help="CUDA graphs over the compiled graphs (torch.compile's reduce-overhead "
                         "mode; with --compile-scope split inductor's cudagraphs on every "
                         "piece): the host launches a graph per piece instead of its kernels")
    ap.add_argument("--split-mb", type=float, default=None,
                    help="(--compile-scope split) parameter MB per graph piece (default: one "
                         "block's)")
    ap.add_argument("--tp", action="store_true",
                    help="(workbench) each block's attention projection + residual as a "
                         "wbtorch.RowParallelLinear over the world (tensor parallel: every rank "
                         "reads rank 0's batch; its weights get a local torch AdamW)")
    ap.add_argument("--tp-schedule", default="auto")
    ap.add_argument("--data", default=str(ROOT / "examples/data/tiny.txt"))
    ap.add_argument("--trace", default=None,
                    help="a Perfetto (Chrome JSON) trace of one step after the warm-up")
    ap.add_argument("--out", default=None, help="JSON of losses and times (rank 0)")
    return ap


def _torch_or_help() -> None:
    """Run as a script without torch: --help answers (the options need no torch), anything
    else is one message saying what to install, exit 2 (not an import traceback)."""
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError:
        if {"-h", "--help"} & set(sys.argv[1:]):
            parser().print_help()
            sys.exit(0)
        print("error: train_gpt.py must run with torch installed (with CUDA), got no module "
              "named 'torch'; pip install torch (the workbench's side also needs the gpu "
              "extra: pip install -e '.[gpu]')", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    _torch_or_help()

import torch  # noqa: E402  (after the check above: --help works without it)
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from workbench.provenance import git_commit  # noqa: E402  (the repo's, after sys.path)


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads
        self.tp = None  # --tp: wbtorch.RowParallelLinear in place of proj + the residual add

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
        y = y.reshape(B, T, D)
        if self.tp is None:
            x = x + self.proj(y)
        else:  # the layer takes this rank's columns of y, sums over the group, adds b and x
            x = self.tp(y, x)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """A few pre-LayerNorm transformer blocks over characters (nanoGPT's shape, no dropout)."""

    def __init__(self, vocab: int, block: int, layers: int, d: int, heads: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x)).float()  # the loss in fp32 at any precision
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def tokens(path: Path) -> tuple[torch.Tensor, int]:
    text = path.read_text(encoding="utf-8")
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return torch.tensor([index[c] for c in text], dtype=torch.long), len(chars)


def batch(data, step: int, rank: int, B: int, T: int, seed: int, device):
    """The same batch for (step, rank) in every run, whatever the optimizer."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    starts = torch.randint(0, data.numel() - T - 1, (B,), generator=g)
    x = torch.stack([data[s:s + T] for s in starts])
    y = torch.stack([data[s + 1:s + T + 1] for s in starts])
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


class _Master:
    """torch's fused AdamW on an fp32 master copy of bf16 parameters (what a torch user
    writes for bf16 weights with fp32 master weights): the bf16 gradients upcast into the
    master's, the step, the master rounded back into the parameters."""

    def __init__(self, params, **kw):
        self.params = list(params)
        self.master = [p.detach().float().clone().requires_grad_() for p in self.params]
        self.opt = torch.optim.AdamW(self.master, fused=True, **kw)

    def step(self):
        with torch.no_grad():
            for p, m in zip(self.params, self.master):
                m.grad = p.grad.float() if p.grad is not None else None
            self.opt.step()
            for p, m in zip(self.params, self.master):
                p.copy_(m)

    def zero_grad(self):
        for p, m in zip(self.params, self.master):
            p.grad = m.grad = None


class _Both:
    """The data-parallel optimizer and a local one (the tensor-parallel weights), as one."""

    def __init__(self, *opts):
        self.opts = opts

    def step(self):
        for o in self.opts:
            o.step()

    def zero_grad(self):
        for o in self.opts:
            o.zero_grad()


def variant(args) -> str:
    """A short name of what runs, for tables."""
    if args.optimizer == "torch":
        name = "torch " + ("fsdp2" if args.torch_sharding == "fsdp2" else
                           f"ddp {args.bucket_mb:g}MB" if args.ddp else "plain")
        name += " zero1" * (args.torch_sharding == "zero1")
        name += " fp32-master" * (args.precision == "bf16-params")
        name += "" if args.optimize_ddp or not args.ddp else " no-split"
    else:
        name = "workbench" + " overlap" * args.overlap + " zero" * args.zero + " tp" * args.tp
        name += " copy-grads" * (not args.lend_grads)
        name += f" {args.blocks_per_sm}/SM" if args.blocks_per_sm else ""
        name += f" {args.bucket_mb:g}MB" if args.bucket_mb != 25 else ""
        name += f" grid {args.fused_grid}" if args.fused_grid is not None else ""
    comp = f"compile {args.compile_scope}" if args.compile else "eager"
    comp += " cudagraphs" * (args.compile and args.cudagraphs)
    comp += f" {args.split_mb:g}MB" if args.compile and args.split_mb is not None else ""
    prec = "" if args.precision == "fp32" else f", {args.precision}"
    return f"{name}, {comp}{prec}"


def refused(args, world: int | None, cuda: bool) -> str | None:
    """Why this run cannot go ahead (an exit-2 message), or None."""
    if not cuda:
        return ("a CUDA GPU must be present to train, got torch.cuda.is_available() False; run "
                "on a GPU machine (torch with CUDA: pip install torch; the workbench side also "
                "needs pycuda: pip install -e '.[gpu]')")
    if args.cudagraphs and not args.compile:
        return "--cudagraphs must run with torch.compile, got --no-compile; drop one"
    if args.tp and args.optimizer != "workbench":
        return "--tp must run with --optimizer workbench, got --optimizer torch; add it"
    if args.fused_grid is not None and (args.optimizer != "workbench" or args.fused_grid < 1):
        return (f"--fused-grid must be a block count >= 1 with --optimizer workbench, got "
                f"{args.fused_grid} with --optimizer {args.optimizer}")
    if args.torch_sharding and args.optimizer != "torch":
        return (f"--torch-sharding must run with --optimizer torch, got --optimizer "
                f"{args.optimizer}; the workbench slices its state with --zero")
    clash = args.torch_sharding and next((option for bad, option in (
        (not args.ddp, "--no-ddp"), (args.precision == "bf16-params", "--precision bf16-params"),
        (args.compile_scope == "split", "--compile-scope split")) if bad), None)
    if clash:
        return (f"--torch-sharding {args.torch_sharding} must run over the group with fp32 or "
                "bf16 parameters and the model compiled whole or by blocks, got "
                f"{clash}; drop it")
    if (args.overlap or args.zero) and args.optimizer != "workbench":
        return ("--overlap and --zero must run with --optimizer workbench, got --optimizer "
                "torch; DDP overlaps by itself")
    if not args.ddp and args.optimizer != "torch":
        return "--no-ddp must run with --optimizer torch (the workbench never wraps in DDP)"
    if args.compile_scope == "split" and args.optimizer == "torch" and args.ddp:
        return ("--compile-scope split must run without DDP (--no-ddp or --optimizer "
                "workbench), got torch DDP, which splits its graph by itself (optimize_ddp)")
    if not args.ddp and world is not None and world > 1:
        return (f"--no-ddp must run at world size 1 (no gradient is averaged without DDP), "
                f"got {world}; drop it or launch one process")
    return None


def build_optimizer(args, model, device):
    """(module to call, optimizer, choices) for the run's optimizer."""
    betas, eps = (0.9, 0.999), 1e-8
    if args.optimizer == "torch":
        return torch_side(args, model, device, dict(lr=args.lr, betas=betas, eps=eps,
                                                    weight_decay=0.0))
    if args.fused_grid is not None:  # read once, where the optimizer reads the WB_* knobs
        os.environ["WB_COLLECTIVE_GRID"] = str(args.fused_grid)
    import wbtorch
    from wbtorch.choice import BLOCKS_PER_SM

    local_params = []
    P = dist.get_world_size()
    if args.tp:
        for blk in model.blocks:
            blk.tp = wbtorch.RowParallelLinear.from_linear(blk.proj, schedule=args.tp_schedule)
            del blk.proj
            local_params += list(blk.tp.parameters())
    tp_ids = {id(p) for p in local_params}
    if P == 1:  # the TP weights are whole: the same buckets as every other weight
        tp_ids = set()
    dp_params = [p for p in model.parameters() if id(p) not in tp_ids]
    program = args.program or str(ROOT / ("examples/adam_bf16.py"
                                          if args.precision == "bf16-params"
                                          else "studies/adam.py"))
    kw = dict(program=program, schedule=args.schedule, choose=args.choose,
              hardware=args.hardware, bucket_bytes=int(args.bucket_mb * 2**20),
              overlap=args.overlap, zero=args.zero,
              lend_grads=None if args.lend_grads else False,
              blocks=(args.blocks_per_sm,) if args.blocks_per_sm else BLOCKS_PER_SM,
              lr=args.lr, beta1=betas[0], beta2=betas[1], eps=eps)
    opt = wbtorch.DataParallelOptimizer(dp_params, **kw)
    choices = [r.cand.label for r in opt.runs]
    if tp_ids:  # each rank's own rows of the TP weights: the same fused optimizer, on a
        # group of this rank alone (every rank makes every group, as new_group requires)
        mine = [dist.new_group([r]) for r in range(P)][dist.get_rank()]
        local = wbtorch.DataParallelOptimizer(local_params, group=mine, check_replicas=False,
                                              **kw)
        opt = _Both(opt, local)
    return model, opt, choices


def torch_side(args, model, device, kw: dict):
    """(module to call, optimizer, choices) for --optimizer torch: AdamW(fused=True) under
    DDP (unless --no-ddp), on an fp32 master copy with --precision bf16-params; with
    --torch-sharding, the state sliced over the ranks as torch does it: zero1 keeps DDP's
    AllReduce and gives each rank one slice of AdamW's state (ZeroRedundancyOptimizer, which
    broadcasts every rank's updated slice after the step), fsdp2 shards the parameters,
    gradients and state of every block and of the model (fully_shard: gradients
    reduce-scattered, parameters all-gathered before each block runs)."""
    if args.torch_sharding == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for blk in model.blocks:
            fully_shard(blk)
        fully_shard(model)
        return model, torch.optim.AdamW(model.parameters(), fused=True, **kw), [
            "fsdp2 + AdamW(fused=True)"]
    net = model
    if args.ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [device.index] if device.type == "cuda" else None
        net = DDP(model, device_ids=ids, bucket_cap_mb=args.bucket_mb)
    ddp = "ddp + " if args.ddp else ""
    if args.precision == "bf16-params":
        return net, _Master(model.parameters(), **kw), [ddp + "AdamW(fused=True) on an fp32 "
                                                        "master"]
    if args.torch_sharding == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                      fused=True, **kw)
        return net, opt, [ddp + "ZeroRedundancyOptimizer(AdamW(fused=True))"]
    return net, torch.optim.AdamW(model.parameters(), fused=True, **kw), [ddp + "AdamW("
                                                                          "fused=True)"]


def compiled(args, net, model):
    """The module to call, compiled as --compile-scope says."""
    if not args.compile:
        return net
    torch._dynamo.config.optimize_ddp = args.optimize_ddp
    mode = "reduce-overhead" if args.cudagraphs else None
    if args.compile_scope == "blocks":
        for b in model.blocks:
            b.compile(mode=mode)
        return net
    if args.compile_scope == "split":
        return torch.compile(net, backend=split_backend(args, model, piece_compiler(args)))
    return torch.compile(net, mode=mode)


def piece_compiler(args):
    """The compiler of --compile-scope split's pieces: inductor, with --cudagraphs its CUDA
    graphs on (what torch.compile's reduce-overhead mode sets), so that each piece's forward
    and backward replay as one graph launch each: the host work per piece that kept the
    in-backward step host-bound at 128 tokens (GPU run 36) is a launch, not the piece's
    kernels one by one."""
    if not args.cudagraphs:
        return "inductor"

    def inductor_cudagraphs(gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, example_inputs, config_patches={"triton.cudagraphs": True})

    return inductor_cudagraphs


def split_bytes(args, model) -> int:
    """Parameter bytes per graph piece of --compile-scope split."""
    if args.split_mb is not None:
        return int(args.split_mb * 2**20)
    return sum(p.numel() * p.element_size() for p in model.blocks[0].parameters())


def split_backend(args, model, compiler="inductor"):
    """inductor over the pieces of the whole-model graph, split as DDP's compile splits it
    (torch._dynamo's DDPOptimizer: pieces of split_bytes() parameter bytes in backward
    order), without DDP: backward runs one autograd node per piece, so the gradients of a
    piece are accumulated (and its buckets launched) while the earlier pieces' backward runs."""
    from torch._dynamo.backends.distributed import DDPOptimizer
    from torch._dynamo.backends.registry import lookup_backend

    cap = split_bytes(args, model)
    return DDPOptimizer(cap, lookup_backend(compiler), first_bucket_cap=cap).compile_fn


PHASES = ("forward", "backward", "optimizer", "step")


def train(args, net, opt, data, device, rank: int):
    """Run the steps; per-step losses (a device tensor), CUDA events per phase and the
    host's wall time. Events are read after the last step (no host synchronisation inside
    the loop, as a training loop that does not log every step)."""
    losses = torch.zeros(args.steps, device=device)
    events, hosts = [], []  # CUDA events per step; the host's clock at the same points
    warm = warmup(args)
    data_rank = 0 if args.tp else rank  # tensor parallel: every rank reads the same batch
    trace = None
    # the host's time per step is taken after the traced step (the profiler and the trace's
    # export slow the host by seconds: run 33's traced runs reported ~5 ms/step too much)
    timed = warm + 1 if args.trace and warm + 1 < args.steps else warm
    t0 = time.perf_counter()
    for step in range(args.steps):
        if args.cudagraphs:  # a new step: the graphs' outputs of the last one are consumed
            torch.compiler.cudagraph_mark_step_begin()
        if args.trace and step == warm:
            trace = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                       torch.profiler.ProfilerActivity.CUDA])
            trace.__enter__()
        if step == timed:
            torch.cuda.synchronize()
            t_warm = time.perf_counter()
        x, y = batch(data, step, data_rank, args.batch, args.block, args.seed, device)
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        h = [time.perf_counter()]
        ev[0].record()
        with torch.autocast("cuda", torch.bfloat16, enabled=args.precision != "fp32"):
            loss = net(x, y)
        ev[1].record()
        h.append(time.perf_counter())
        loss.backward()
        ev[2].record()
        h.append(time.perf_counter())
        opt.step()
        ev[3].record()
        h.append(time.perf_counter())
        opt.zero_grad()
        losses[step] = loss.detach()
        h.append(time.perf_counter())
        events.append(ev)
        hosts.append(h)
        if trace is not None and step == warm:
            torch.cuda.synchronize()
            trace.__exit__(None, None, None)
            trace.export_chrome_trace(args.trace)
            trace = None
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    host_ms = (t1 - t_warm) * 1e3 / max(1, args.steps - timed)
    return losses, events, hosts, host_ms, t1 - t0


def warmup(args) -> int:
    """Steps left out of the medians: compile, autotuning and allocator warm-up."""
    if args.warmup_steps is not None:
        return min(args.warmup_steps, args.steps - 1)
    return min(20, args.steps // 2)


def phase_medians(events, warm: int) -> dict:
    """Median milliseconds of each phase after the warm-up (the step: first to last event)."""
    spans = {"forward": (0, 1), "backward": (1, 2), "optimizer": (2, 3), "step": (0, 3)}
    return {k: statistics.median(ev[a].elapsed_time(ev[b]) for ev in events[warm:])
            for k, (a, b) in spans.items()}


def host_medians(hosts, warm: int) -> dict:
    """Median milliseconds the host spent issuing each phase after the warm-up (forward,
    backward with its hooks, optimizer step, and zero_grad with the loss's bookkeeping):
    where a phase's host time reaches its GPU time, the GPU waited for the host."""
    names = ("forward", "backward", "optimizer", "zero_grad")
    return {k: statistics.median((h[i + 1] - h[i]) * 1e3 for h in hosts[warm:])
            for i, k in enumerate(names)}


def main(argv=None) -> int:
    args = parse(argv)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    world = int(os.environ["WORLD_SIZE"]) if "WORLD_SIZE" in os.environ else None
    why = refused(args, world, torch.cuda.is_available())
    if why:
        print(f"train_gpt.py: {why}", file=sys.stderr)
        return 2
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=device)
    rank, P = dist.get_rank(), dist.get_world_size()
    data, vocab = tokens(Path(args.data))
    torch.manual_seed(args.seed)  # the same initial model on every rank
    model = GPT(vocab, args.block, args.layers, args.model_dim, args.heads).to(device)
    if args.precision == "bf16-params":
        model = model.to(torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    net, opt, choices = build_optimizer(args, model, device)
    net = compiled(args, net, model)
    losses, events, hosts, host_ms, wall = train(args, net, opt, data, device, rank)
    # each rank's loss is of its own batch: report the group's mean, as DDP training logs do
    dist.all_reduce(losses)
    losses /= P
    warm = warmup(args)
    phases = phase_medians(events, warm)
    host_phases = host_medians(hosts, warm)
    if args.tp:
        choices += [f"tp T={t}: {s}" for t, s in model.blocks[0].tp.choice.items()]
    free, total = torch.cuda.mem_get_info()
    wb = getattr(opt, "opts", (opt,))[0]
    result = {"optimizer": args.optimizer + ("+tp" if args.tp else ""),
              "variant": variant(args), "P": P, "params": n_params, "steps": args.steps,
              "warmup_steps": warm, "model_dim": args.model_dim, "layers": args.layers,
              "batch": args.batch, "block": args.block, "bucket_mb": args.bucket_mb,
              "compile": args.compile, "compile_scope": args.compile_scope,
              "cudagraphs": args.cudagraphs,
              "ddp": args.optimizer == "torch" and args.ddp and args.torch_sharding != "fsdp2",
              "torch_sharding": args.torch_sharding, "overlap": args.overlap,
              "zero": args.zero, "precision": args.precision, "choices": choices,
              "losses": losses.cpu().tolist(),
              "phases_ms": phases, "step_ms_median": phases["step"],
              "opt_ms_median": phases["optimizer"], "host_step_ms": host_ms, "wall_s": wall,
              "host_phases_ms": host_phases, "split_bytes": (split_bytes(args, model)
                                                             if args.compile_scope == "split"
                                                             else None),
              "optimizer_memory": wb.memory() if hasattr(wb, "memory") else None,
              "grad_rebinds": getattr(wb, "rebinds", None),
              "buckets": len(getattr(wb, "runs", ())),
              "torch_max_allocated": torch.cuda.max_memory_allocated(),
              "device_used": total - free,
              "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "commit": git_commit(), "command": ["examples/train_gpt.py",
                                              *(sys.argv[1:] if argv is None else argv)]}
    if rank == 0:
        print(f"{result['variant']}: P={P} params={n_params} loss {result['losses'][0]:.4f} -> "
              f"{result['losses'][-1]:.4f}; " + ", ".join(f"{k} {v:.3f}" for k, v in
                                                           phases.items())
              + f" ms; host {host_ms:.3f} ms/step ("
              + ", ".join(f"{k} {v:.3f}" for k, v in host_phases.items())
              + f"; medians after {warm} steps); "
              + ", ".join(f"{choices.count(c)} x {c}" for c in dict.fromkeys(choices)))
        if not all(math.isfinite(v) for v in result["losses"]):
            print("losses are not finite", file=sys.stderr)
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown (as workbench/runtime/worker.py does): NCCL communicators and
    # CUDA IPC mappings go with the process, and library destructors in arbitrary order can
    # hang it.
    os._exit(code)
