"""A tensor-parallel (row-parallel) linear layer whose forward is a schedule of the
model-parallel layer's program (examples/tp_layer.py, the study's layer without its fixed-seed
dropout): out = AllReduce_group(x_local @ W_local) + b + residual, as Megatron's row-parallel
Linear followed by the residual add (design note 52). x_local is this rank's columns of the
layer's input x, which every rank of the group holds whole.

The forward runs the chosen schedule's generated code (cuBLAS MatMul, then the fused
AllReduce with the bias and residual on slices, or that overlapped with the MatMul) on the
torch tensors themselves: the plan's input buffers are rebound to the activations' and
parameters' memory (BoundPlan.rebind, no copy); the output, which lives in a buffer the other
ranks map, is copied out once (the next forward overwrites that buffer). The backward is
torch's: grad_x_local = grad @ W_local^T, all-gathered over the group into the gradient of
the whole input (Megatron's "f" for a replicated input: each rank computed only its columns);
grad_W = x_local^T @ grad, grad_b = sum of grad over tokens, grad_residual = grad (the output
gradient is the same on every rank of the group). The forward is the custom op
`wbtorch::row_parallel_forward` with that backward registered, and the gather the op
`wbtorch::all_gather_cols`, so a torch.compile'd model keeps one graph through the layer (design
note 56).

`schedule="auto"` times every schedule and the torch form (torch.matmul + NCCL all_reduce +
bias and residual) on the first forward of each token count, on that forward's own inputs (the
forward has no side effects), and keeps rank 0's pick; the choice is logged.

Imports torch at module level: `wbtorch` imports this module only on first use.
"""

from __future__ import annotations

import itertools
import math
import statistics
import sys
import weakref

import torch
from torch import nn

from wbtorch import choice as ch
from wbtorch import optim as _optim
from wbtorch.programs import ProgramRoleError, pick_schedule
from workbench.loader import load
from workbench.options import CodegenOptions

DEFAULT_PROGRAM = "examples/tp_layer.py"


# Live layers by key: the custom ops below take plain arguments only (tensors, ints), so a layer
# is named by an int and found here by the op's real implementation (weak: a dropped layer goes).
_LAYERS: weakref.WeakValueDictionary[int, RowParallelLinear] = weakref.WeakValueDictionary()
_KEYS = itertools.count()


# The forward is a torch.library custom op (design note 56): torch.compile sees one opaque node
# with a fake (meta) implementation and a registered backward, so a compiled model keeps one
# graph through the layer (no graph break, no Python between pieces); the choice, the plans and
# the logging stay in the real implementation, which runs at every call.
@torch.library.custom_op("wbtorch::row_parallel_forward", mutates_args=())
def row_parallel_forward(x: torch.Tensor, x_local: torch.Tensor, residual: torch.Tensor,
                         weight: torch.Tensor, bias: torch.Tensor, key: int) -> torch.Tensor:
    """AllReduce(x_local @ weight) + bias + residual by the layer `key`'s chosen schedule. `x`
    (the whole input, unread here) is an input only so that the backward can give it the
    all-gathered gradient; x_local (its columns of this rank) is sliced in traced torch code."""
    return _LAYERS[key]._forward(x_local, residual, weight, bias)


@row_parallel_forward.register_fake
def _(x, x_local, residual, weight, bias, key):
    return torch.empty_like(residual)


@torch.library.custom_op("wbtorch::all_gather_cols", mutates_args=())
def all_gather_cols(t: torch.Tensor, key: int) -> torch.Tensor:
    """[T, k] on each rank of layer `key`'s group -> [T, P k], rank i's columns at i k."""
    layer = _LAYERS[key]
    parts = torch.empty((layer.P, *t.shape), dtype=t.dtype, device=t.device)
    layer.gpu.dist.all_gather_into_tensor(parts, t.contiguous(), group=layer.group)
    return parts.permute(1, 0, 2).reshape(t.shape[0], -1)


@all_gather_cols.register_fake
def _(t, key):
    return t.new_empty((t.shape[0], t.shape[1] * _LAYERS[key].P))


def _setup_context(ctx, inputs, output):
    _, x_local, _, weight, _, key = inputs
    ctx.save_for_backward(x_local, weight)
    ctx.key = key


def _backward(ctx, grad):
    x_local, weight = ctx.saved_tensors
    grad_local = grad @ weight.t()
    # every rank's columns of the input's gradient, on every rank (Megatron's "f" for a
    # replicated input); it goes to the whole x, so x_local (the slice) gets none
    grad_x = all_gather_cols(grad_local, ctx.key) if _LAYERS[ctx.key].P > 1 else grad_local
    return grad_x, None, grad, x_local.t() @ grad, grad.sum(0), None


row_parallel_forward.register_autograd(_backward, setup_context=_setup_context)


class RowParallelLinear(nn.Module):
    """y = AllReduce(x_local @ weight) + bias + residual over a torch.distributed group.

    weight: this rank's rows of the (in x out) matrix, shape [H / P, H]; the input x (whole,
    the same on every rank), residual and output: [..., H]; the layer computes with x's
    columns of this rank. `program`: a program
    file of the form of examples/tp_layer.py (its `f16` for half precision); `schedule`: one
    of its schedules, 'unscheduled', 'torch', or 'auto'."""

    def __init__(self, hidden: int, group=None, program: str | None = None,
                 schedule: str = "auto", dtype=torch.float32, trial_reps: int = 3,
                 log=None):
        super().__init__()
        self.gpu = _optim.gpu_for(group)
        self.P, self.rank, self.group = self.gpu.P, self.gpu.rank, group
        if hidden % self.P:
            raise ProgramRoleError(f"the hidden size must divide by the group size P = "
                                   f"{self.P}, got {hidden}; pick a multiple of {self.P}")
        self.hidden = hidden
        spec = program or str(_optim.ROOT / DEFAULT_PROGRAM)
        self.codegen = CodegenOptions.from_env()  # the WB_* knobs, read once here
        self.loaded = load(spec)
        if schedule not in ("auto", ch.TORCH):
            pick_schedule(self.loaded, schedule)  # a clear error for a schedule it lacks
        self.schedule, self.trial_reps = schedule, trial_reps
        # P = 1 with schedule 'auto': nothing to all-reduce, so the layer is traced torch code
        # (x @ W + b + residual, which the compiler fuses as it does nn.Linear's); a named
        # schedule still runs through the op (design note 83)
        self.direct = self.P == 1 and schedule == "auto"
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        k = hidden // self.P
        dev = torch.device("cuda", self.gpu.device_index) if hasattr(self.gpu, "device_index") \
            else None
        self.weight = nn.Parameter(torch.empty(k, hidden, dtype=dtype, device=dev))
        self.bias = nn.Parameter(torch.zeros(hidden, dtype=dtype, device=dev))
        bound = 1 / math.sqrt(hidden)  # nn.Linear's default initialisation
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)
        self._plans: dict = {}  # (T, schedule) -> BoundPlan
        self.choice: dict[int, str] = {}  # T -> the schedule the forward runs
        self.trials: dict[int, dict] = {}
        self.key = next(_KEYS)  # the custom ops' name for this layer
        _LAYERS[self.key] = self

    @classmethod
    def from_linear(cls, linear: nn.Linear, group=None, **kw) -> RowParallelLinear:
        """The layer holding this rank's rows of a square nn.Linear's (in x out) weight and
        its bias (the same function of the whole input, split over the group)."""
        if linear.in_features != linear.out_features or linear.bias is None:
            raise ProgramRoleError(f"a row-parallel layer must come from a square Linear with a "
                                   f"bias, got {linear.in_features} -> {linear.out_features}, "
                                   f"bias {linear.bias is not None}")
        layer = cls(linear.in_features, group, dtype=linear.weight.dtype, **kw)
        k = linear.in_features // layer.P
        with torch.no_grad():
            layer.weight.copy_(linear.weight.t()[layer.rank * k:(layer.rank + 1) * k])
            layer.bias.copy_(linear.bias)
        return layer

    def forward(self, x, residual):
        shape = residual.shape
        if x.shape != shape:
            raise ProgramRoleError(f"a row-parallel layer's input and residual must have the "
                                   f"same shape [..., {self.hidden}], got {tuple(x.shape)} and "
                                   f"{tuple(shape)}; pass the whole input (the layer takes its "
                                   "columns)")
        if self.direct:
            return torch.matmul(x, self.weight) + self.bias + residual
        x2 = x.reshape(-1, shape[-1])
        r2 = residual.reshape(-1, shape[-1])
        k = self.hidden // self.P
        x_local = x2[:, self.rank * k:(self.rank + 1) * k].contiguous()
        out = row_parallel_forward(x2, x_local, r2, self.weight, self.bias, self.key)
        return out.view(shape)

    # -- the forward's schedules

    def _plan(self, T: int, name: str):
        from codegen.lower import lower

        key = (T, name)
        if key not in self._plans:
            program = pick_schedule(self.loaded, name)
            self._plans[key] = _optim._bind(self.gpu, lower(program, self.P, self.codegen),
                                            {"T": T, "H": self.hidden, "P": self.P})
        return self._plans[key]

    def _run(self, name: str, x, residual, weight, bias):
        if name == ch.TORCH:
            y = x @ weight
            if self.P > 1:
                self.gpu.dist.all_reduce(y, group=self.group)
            return y + bias + residual
        plan = self._plan(x.shape[0], name)
        plan.rebind({"x": x.contiguous(), "W": weight.detach().contiguous(),
                     "b": bias.detach().contiguous(), "r": residual.contiguous()})
        plan.run()
        return plan.view("out").view(x.shape[0], self.hidden).clone()

    def _forward(self, x, residual, weight, bias):
        T = x.shape[0]
        if T not in self.choice:
            self.choice[T] = self._choose(T, x, residual, weight, bias)
        return self._run(self.choice[T], x, residual, weight, bias)

    def _choose(self, T, x, residual, weight, bias) -> str:
        if self.schedule != "auto":
            return self.schedule
        names = ["unscheduled", *self.loaded.schedules, ch.TORCH]
        times = {}
        for name in names:
            try:
                ts = []
                for _ in range(self.trial_reps + 1):
                    a = torch.cuda.Event(enable_timing=True)
                    z = torch.cuda.Event(enable_timing=True)
                    a.record()
                    self._run(name, x, residual, weight, bias)
                    z.record()
                    z.synchronize()
                    ts.append(a.elapsed_time(z) * 1e-3)
                times[name] = statistics.median(ts[1:])
            except Exception as e:  # a schedule that does not run here is not a candidate
                self.log(f"[wbtorch] tp candidate {name} left out: {e}")
                times[name] = math.nan
        times = dict(zip(names, self.gpu.comm.host.bcast(list(times.values()))))
        ok = {n: t for n, t in times.items() if not math.isnan(t)}
        if not ok:
            raise ProgramRoleError("a tensor-parallel layer must have a schedule that runs, got "
                                   "none; pass schedule='torch'")
        pick = min(ok, key=ok.get)
        self.trials[T] = times
        if self.rank == 0:
            self.log(f"[wbtorch] tp layer T = {T}, H = {self.hidden}: chose {pick}; " + ", ".join(
                f"{n} {t * 1e3:.4f} ms" for n, t in times.items()))
        return pick
