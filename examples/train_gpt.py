"""A small GPT trained data-parallel under torchrun, with the optimizer step done by torch or
by the workbench's generated kernels (design note 53).

    torchrun --nproc_per_node=1 examples/train_gpt.py --optimizer torch --out a.json
    torchrun --nproc_per_node=1 examples/train_gpt.py --optimizer workbench --out b.json
    python examples/compare_losses.py a.json b.json

--optimizer torch: torch DDP + AdamW(fused=True, weight_decay=0), the model under torch.compile
  (--no-compile to run eager).
--optimizer workbench: the same model (no DDP wrapper) and wbtorch.DataParallelOptimizer over
  studies/adam.py (--program, --schedule auto|NAME): each gradient bucket's AllReduce + Adam
  update is one generated kernel of the chosen schedule.
--optimizer workbench --tp: also each block's attention projection + residual add as a
  wbtorch.RowParallelLinear (its forward a schedule of examples/tp_layer.py) over the world.

Both read the same character-level tokens (examples/data/tiny.txt, shipped) in the same order,
so losses agree step by step up to fp32 rounding (compare_losses.py states the tolerance).
Writes per-step losses, the median step time and the median optimizer time (CUDA events;
for DDP the AllReduce runs inside backward, so torch's optimizer time is AdamW's step alone
and the workbench's includes the AllReduce: the step time is the comparable number).
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

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from anywhere: the repo's packages first
    sys.path.insert(0, str(ROOT))


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
        logits = self.head(self.ln(x))
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


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--optimizer", choices=["torch", "workbench"], required=True)
    ap.add_argument("--program", default=str(ROOT / "studies/adam.py"))
    ap.add_argument("--schedule", default="auto")
    ap.add_argument("--choose", choices=["measure", "predict"], default="measure")
    ap.add_argument("--hardware", default=None)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--tp", action="store_true",
                    help="(workbench) each block's attention projection + residual as a "
                         "wbtorch.RowParallelLinear over the world (tensor parallel: every rank "
                         "reads rank 0's batch; its weights get a local torch AdamW)")
    ap.add_argument("--tp-schedule", default="auto")
    ap.add_argument("--data", default=str(ROOT / "examples/data/tiny.txt"))
    ap.add_argument("--out", default=None, help="JSON of losses and times (rank 0)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    if args.tp and args.optimizer != "workbench":
        print("--tp needs --optimizer workbench", file=sys.stderr)
        return 2
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=device)
    rank, P = dist.get_rank(), dist.get_world_size()
    data, vocab = tokens(Path(args.data))
    torch.manual_seed(args.seed)  # the same initial model on every rank
    model = GPT(vocab, args.block, args.layers, args.d, args.heads).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    betas, eps = (0.9, 0.999), 1e-8
    if args.optimizer == "torch":
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(model, device_ids=[local], bucket_cap_mb=args.bucket_mb)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=betas, eps=eps,
                                weight_decay=0.0, fused=True)
        choices = ["ddp + AdamW(fused=True)"]
    else:
        import wbtorch

        net = model
        local_params = []
        if args.tp:
            for blk in model.blocks:
                blk.tp = wbtorch.RowParallelLinear.from_linear(blk.proj,
                                                               schedule=args.tp_schedule)
                del blk.proj
                local_params += list(blk.tp.parameters())
        tp_ids = {id(p) for p in local_params}
        dp_params = [p for p in model.parameters() if id(p) not in tp_ids]
        opt = wbtorch.DataParallelOptimizer(
            dp_params, args.program, args.schedule, choose=args.choose,
            hardware=args.hardware, bucket_bytes=int(args.bucket_mb * 2**20),
            lr=args.lr, beta1=betas[0], beta2=betas[1], eps=eps)
        choices = [r.cand.label for r in opt.runs]
        if local_params:  # each rank's own slice of the TP weights: a local optimizer
            opt = _Both(opt, torch.optim.AdamW(local_params, lr=args.lr, betas=betas, eps=eps,
                                               weight_decay=0.0, fused=True))
    if args.compile:
        net = torch.compile(net)
    losses = torch.zeros(args.steps, device=device)
    step_ms, opt_ms = [], []
    t0 = time.time()
    data_rank = 0 if args.tp else rank  # tensor parallel: every rank reads the same batch
    for step in range(args.steps):
        x, y = batch(data, step, data_rank, args.batch, args.block, args.seed, device)
        a, b, c = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        a.record()
        loss = net(x, y)
        loss.backward()
        b.record()
        opt.step()
        c.record()
        opt.zero_grad()
        losses[step] = loss.detach()
        c.synchronize()
        step_ms.append(a.elapsed_time(c))
        opt_ms.append(b.elapsed_time(c))
    wall = time.time() - t0
    # each rank's loss is of its own batch: report the group's mean, as DDP training logs do
    dist.all_reduce(losses)
    losses /= P
    warm = min(20, args.steps // 2)  # compile and autotuning warm-up left out of the medians
    if args.tp:
        choices += [f"tp T={t}: {s}" for t, s in model.blocks[0].tp.choice.items()]
    result = {"optimizer": args.optimizer + ("+tp" if args.tp else ""), "P": P,
              "params": n_params, "steps": args.steps,
              "compile": args.compile, "choices": choices,
              "losses": losses.cpu().tolist(),
              "step_ms_median": statistics.median(step_ms[warm:]),
              "opt_ms_median": statistics.median(opt_ms[warm:]), "wall_s": wall,
              "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    if rank == 0:
        print(f"{args.optimizer}: P={P} params={n_params} loss {result['losses'][0]:.4f} -> "
              f"{result['losses'][-1]:.4f}; step {result['step_ms_median']:.3f} ms, optimizer "
              f"{result['opt_ms_median']:.3f} ms (medians after {warm} steps); {choices}")
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
    # Skip interpreter teardown (as workbench/runtime/worker.py does): NCCL communicators and CUDA IPC
    # mappings go with the process, and library destructors in arbitrary order can hang it.
    os._exit(code)
