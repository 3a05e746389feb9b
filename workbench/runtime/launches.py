"""What a plan step becomes once bound to this rank's buffers (a prepared launch), and the
interface the step runners read of the run they belong to (`RunView`).

The executor prepares each typed plan step by a table keyed by its class
(`executor.PREPARERS`) and enqueues each prepared launch by a table keyed by its class
(`executor.RUNNERS`); the pieces that run in parts (workbench.runtime.chunked) and the torch
bridge use the same public interface, never the run's internals. This module imports no other
module of the runtime, so none of them needs to import the executor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class KernelLaunch:
    """A generated kernel bound to this rank: its compiled function, grid and argument list.
    The list is the kernel's parameters in order; `epoch_at` (a collective's epoch) and
    `seq_at` (a fused Send's sequence number) are positions in it that change per launch, as do
    the chunk and window parameters (set by the launch's caller)."""

    step: Any  # codegen.plan.KernelStep
    fn: Any  # pycuda Function, prepared with the parameters' signature
    grid: int
    args: list
    epoch_at: int | None = None
    seq_at: int | None = None
    runs: list = field(default_factory=lambda: [0])  # runs of the step launched (a Send's seq)
    threads: int = 512  # a block's threads (codegen.spec.THREADS; a "rows" row kernel's vary)


@dataclass(frozen=True)
class NcclCall:
    """An NcclStep bound to this rank's addresses: the op, reduction and dtype from `step`."""

    step: Any  # codegen.plan.NcclStep
    src: int
    dst: int
    count: int


@dataclass(frozen=True)
class P2pCall:
    """An unfused Send's half on this rank: "send" (source stage) or "recv" (destination)."""

    op: str
    address: int
    count: int
    dtype: str
    peer: int


@dataclass(frozen=True)
class LibraryCall:
    """A library call enqueued on the default stream (a GEMM, a reduction): `call()`."""

    call: Callable[[], None]


@dataclass(frozen=True)
class PartsCall:
    """A step that runs in parts on its own streams (an overlap, copy engines): `runner.run()`."""

    runner: Any  # chunked.OverlapRun, chunked.CopyEnginesRun


@dataclass(frozen=True)
class ChunkedCall:
    """Prepared launches run chunk by chunk on one stream (codegen.plan.ChunkedStep)."""

    chunks: int
    items: tuple


class RunView(Protocol):
    """The public interface of a plan bound to this rank (executor.PlanRun) that step runners
    read: the GPU layer, the group, sizes evaluated, addresses, and how to prepare and launch
    a step."""

    gpu: Any
    P: int
    stage: int
    local: int

    def int_of(self, expr) -> int:
        """A size expression's value with this run's sizes and rank bound."""

    def address(self, loc, dtype: str) -> int:
        """The device address of a value's first element on this rank."""

    def pointer(self, name: str, rank: int) -> int:
        """The address of buffer `name` of global rank `rank` in this process."""

    def prepare(self, step):
        """A plan step bound to this rank (a prepared launch of this module)."""

    def launch(self, item: KernelLaunch, stream=None, chunk: int | None = None,
               window: tuple[int, int] | None = None) -> None:
        """Launch one prepared kernel."""

    def launch_chunk(self, item, i: int, chunks: int, stream=None) -> None:
        """Enqueue chunk i of a prepared kernel or NCCL call."""
