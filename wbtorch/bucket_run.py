"""One gradient bucket of the data-parallel optimizer (wbtorch.optim): the plan of its chosen
schedule, whose buffers hold the bucket's gradient, weights and state, and the step that runs
it. At P = 1 a bucket of one large parameter reads torch's own `.grad` tensor in place
(`lend`, design note 82); a mixed-precision program's bucket holds the fp32 master weights and
the low-precision weights the model reads (note 83). torch is imported by the optimizer.
"""

from __future__ import annotations

from wbtorch import buckets as bk
from wbtorch import choice as ch
from wbtorch.programs import STEP, check_in_place, pick_schedule, roles


class BucketRun:
    """One bucket's chosen way to run and the plan that holds its memory."""

    def __init__(self, opt, bucket: bk.Bucket, cand: ch.Candidate, bind):
        """`opt`: the DataParallelOptimizer (its device, P, program and knobs); `bind`: how a
        lowered plan is bound to the device (wbtorch.optim._bind, a seam of the tests)."""
        from codegen.lower import lower

        self.bucket, self.cand = bucket, cand
        key = "unscheduled" if cand.schedule == ch.TORCH else cand.schedule
        program = pick_schedule(opt.loaded, key)
        self.roles = roles(program)
        plan = lower(program, opt.P, cand.options(opt.codegen))
        check_in_place(program, plan.locs, self.roles.low)
        self.bound = bind(opt.gpu, plan, {"N": bucket.numel, "P": opt.P}, cand.blocks_per_sm)
        self.g = self.own_g = self.bound.view(self.roles.grad)
        self.w = self.bound.view(self.roles.weights)  # mixed precision: the fp32 master
        # mixed precision: the low-precision weights the kernel writes, which the model reads
        self.low = self.bound.view(self.roles.low) if self.roles.low else None
        self.state = {s: self.bound.view(s) for s in self.roles.state}
        self.scalars = {s: self.bound.view(s) for s in self.roles.scalars}
        self.opt = opt
        # P = 1, one parameter, no padding: the plan reads torch's .grad where it is (note 82)
        self.lends = (getattr(opt, "lend_grads", False) and len(bucket.slots) == 1
                      and bucket.numel == bucket.used)
        self.shared_step = False  # the optimizer's one step scalar (note 82), filled per step

    def _grad_to(self, t) -> None:
        """The plan's gradient buffer becomes `t`'s memory (a flat tensor of N elements)."""
        if t.data_ptr() != self.g.data_ptr():
            self.bound.rebind({self.roles.grad: t})
            self.g = self.bound.view(self.roles.grad)
            self.opt.rebinds += 1

    def lend(self, p) -> None:
        """Before a lending bucket runs: its gradient is `p.grad` in place (contiguous, of the
        bucket's dtype), else the plan's own buffer (None: zeros; another layout: a copy),
        which `p.grad` then views."""
        grad = p.grad
        if (grad is not None and grad.is_contiguous() and grad.dtype == self.own_g.dtype
                and grad.device == self.own_g.device and grad.numel() == self.own_g.numel()):
            if grad.data_ptr() != self.g.data_ptr():
                self._grad_to(grad.view(-1))
            return
        if self.g.data_ptr() != self.own_g.data_ptr():
            self._grad_to(self.own_g)
        with self.opt.torch.no_grad():
            if grad is None:
                self.own_g.zero_()
            else:
                self.own_g.copy_(grad.reshape(-1))
        p.grad = self.own_g.view(p.shape)

    def take_grads(self, params: list, views: dict) -> None:
        """Before the bucket runs: every parameter's gradient is in the bucket and `.grad`
        views it again, divided by P (DDP's average) at P > 1, in one pass. A lending bucket
        reads `.grad` in place (`lend`). Else a gradient backward handed over as a new tensor
        (`.grad` was None) is copied in, all of the bucket's at once at P = 1 (one foreach
        launch, not one copy per parameter from each parameter's hook: design note 93), each
        scaled as it is copied at P > 1; one already in the bucket (accumulated in place) is
        scaled where it is; None is zero. `views`: parameter index -> its view of the bucket."""
        torch = self.opt.torch
        if self.lends:
            self.lend(params[self.bucket.slots[0].index])
            return
        inv, P = 1.0 / self.opt.P, self.opt.P
        new_v, new_g, held = [], [], []
        with torch.no_grad():
            for slot in self.bucket.slots:
                p, view = params[slot.index], views[slot.index]
                grad = p.grad
                if grad is view:
                    held.append(view)
                    continue
                if grad is None:
                    view.zero_()
                else:
                    new_v.append(view)
                    new_g.append(grad)
                p.grad = view
            if new_g and P == 1:
                torch._foreach_copy_(new_v, new_g)
            elif new_g:
                for view, grad in zip(new_v, new_g):
                    torch.mul(grad, inv, out=view)
            if P > 1 and held:
                if len(held) == len(self.bucket.slots):
                    self.g.mul_(inv)  # the whole bucket, one launch (its padding is zero)
                else:
                    torch._foreach_mul_(held, inv)

    def sliced(self, name: str) -> bool:
        return name in self.roles.sliced_state or (name == self.roles.weights
                                                  and self.roles.weights_sliced)

    def run(self, step: int, side=None) -> None:
        """Enqueue the bucket's step (on `side`, a SideStream that is torch's current stream,
        when the optimizer runs in backward)."""
        opt = self.opt
        if STEP in self.scalars and not self.shared_step:
            self.scalars[STEP].fill_(float(step))
        # (the gradient is averaged by take_grads, which the optimizer calls first)
        if self.cand.generated:
            if side is None:
                self.bound.run()
            else:
                self.bound.run(side)
        else:
            opt._torch_step(self, step)

    def keeps_state_sliced(self) -> bool:
        return set(self.roles.sliced_state) == set(self.roles.state)

    def saved(self) -> dict:
        """What a checkpoint holds of this bucket: the state, and (mixed precision) the fp32
        master weights, which the model's low-precision copy cannot give back."""
        return {**self.state, **({self.roles.weights: self.w} if self.low is not None else {})}

    @property
    def torch_free(self) -> bool:
        """Whether run() enqueues no torch op (a generated kernel whose launches all go onto
        the side stream, the step scalar filled by the optimizer; the 1/P scale is
        take_grads'): then the side stream need not be torch's current stream around it."""
        return (self.cand.generated and getattr(self.bound, "direct", True)
                and (self.shared_step or STEP not in self.scalars))
