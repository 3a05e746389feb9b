"""The optimizer in backward (design note 63): which gradient buckets are complete while
backward runs, so that each bucket's AllReduce + update is launched as soon as its last
gradient is accumulated, as DDP launches each bucket's AllReduce.

`Readiness` is the bookkeeping, without torch (tested in CI): parameters are marked ready one
by one (torch's post-accumulate-grad hooks call `mark`); a bucket whose every parameter is
marked in the current backward is complete, and complete buckets are launched in bucket order
only (bucket k after buckets 0..k-1, as DDP issues its AllReduces): every rank then enqueues
the same buckets in the same order, which a collective needs (rank 0 waiting in bucket 3 for
a peer that waits in bucket 2 for rank 0 would never end). A backward that ends leaves no
partial marks behind (`end_backward`), so a bucket is launched only on gradients that are all
of one backward; while accumulating (`no_sync`) no bucket is launched; `pending` lists the
buckets the step must still run itself (a parameter that got no gradient leaves its bucket
incomplete, and holds back the buckets after it: the step runs them after backward, on the
gradients as they are).

`install_hooks` registers the hooks (torch is imported there).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wbtorch.buckets import Bucket


@dataclass(slots=True)
class Readiness:
    """Per-step state of the buckets: which parameters have their gradient in this backward,
    which buckets were launched this step, and in what order."""

    members: tuple[frozenset[int], ...]  # bucket -> the parameter indices it holds
    bucket_of: dict[int, int]  # parameter index -> bucket
    accumulating: bool = False
    in_backward: bool = False  # a hook of the current backward queued end_backward
    marked: list[set[int]] = field(default_factory=list)
    complete: set[int] = field(default_factory=set)  # complete, waiting for earlier buckets
    launched: list[int] = field(default_factory=list)  # bucket indices, in launch order

    @classmethod
    def of(cls, buckets: list[Bucket]) -> Readiness:
        members = tuple(frozenset(s.index for s in b.slots) for b in buckets)
        bucket_of = {i: k for k, m in enumerate(members) for i in m}
        return cls(members, bucket_of, marked=[set() for _ in members])

    def mark(self, param: int) -> list[int]:
        """Parameter `param`'s gradient is accumulated: the buckets to launch now, in order
        (its bucket if that completes it and every earlier bucket is launched, and the
        complete ones after it; none while accumulating, none twice in a step)."""
        k = self.bucket_of[param]
        done = self.marked[k]
        done.add(param)
        if len(done) < len(self.members[k]):
            return []
        done.clear()
        if self.accumulating or k in self.launched:
            return []
        self.complete.add(k)
        out = []
        while len(self.launched) in self.complete:
            nxt = len(self.launched)
            self.complete.discard(nxt)
            self.launched.append(nxt)
            out.append(nxt)
        return out

    def end_backward(self) -> None:
        """A backward ended: forget partial marks (a later backward starts afresh)."""
        self.in_backward = False
        for done in self.marked:
            done.clear()

    def pending(self) -> list[int]:
        """The buckets not launched this step, in bucket order."""
        return list(range(len(self.launched), len(self.members)))

    def take_pending(self) -> list[int]:
        """pending(), now counted as launched (the step runs them)."""
        out = self.pending()
        self.launched.extend(out)
        return out

    def new_step(self) -> list[int]:
        """Start the next step; returns this step's launch order."""
        order, self.launched = self.launched, []
        self.complete.clear()
        self.end_backward()
        return order


def install_hooks(params: list, readiness: Readiness, on_ready) -> list:
    """Register a post-accumulate-grad hook on every parameter of a bucket: it marks the
    parameter ready, calls `on_ready(bucket)` for each bucket that can launch now, and on the
    first hook of a backward queues `readiness.end_backward` to run when that backward ends.
    The hook does nothing else on the host (no torch op per parameter: the bucket takes its
    gradients when it launches; design note 93). Returns the hook handles (`.remove()` each to
    uninstall)."""
    from torch.autograd import Variable

    queue = Variable._execution_engine.queue_callback
    mark = readiness.mark

    def hook_for(index: int):
        def hook(p):
            if not readiness.in_backward:
                readiness.in_backward = True
                queue(readiness.end_backward)
            for k in mark(index):
                on_ready(k)

        return hook

    return [params[i].register_post_accumulate_grad_hook(hook_for(i))
            for i in sorted(readiness.bucket_of)]
