"""A pipelined hierarchy on one rank (codegen.plan.PipelineStep; codegen.lower_pipeline): its
three legs on three CUDA streams, chunk by chunk, and where a node's view keeps its values.

Leg k of chunk c waits on the event leg k-1 recorded after chunk c, and follows leg k of chunk
c-1 on its own stream, so chunk c+1's node ReduceScatter runs while chunk c crosses the
network and chunk c-1 is updated and gathered. The streams are blocking streams (pycuda's
default flags): work on the legacy default stream (every other step, the timing events)
orders against them both ways, and a join event at the start keeps a run's first leg behind
everything enqueued before it (a fused gather's end barrier covers the peers).

A node's view (Plan.per_node): rank r is local rank r % per_node of node r // per_node; a
Local value is the rank's own, a NodeSliced one the local rank's slice, chunk by chunk where
the plan pipelines (Plan.slice_chunks): chunk c of local rank l is the whole tensor's
elements (c * per_node + l) * E + e (`node_part`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from codegen.plan import PipelineStep
from workbench.errors import RuntimeFault
from workbench.types import LocalLayout, NodeSliced, Sliced

if TYPE_CHECKING:
    from workbench.runtime.executor import PlanRun


def node_part(value: np.ndarray, t, rank: int, per_node: int, chunks: int = 1) -> np.ndarray:
    """Rank `rank`'s part of a logical value of type `t` in a node's view: its own for Local,
    its local rank's slice for NodeSliced (or a slice over the node: Sliced in the view),
    chunk by chunk when `chunks` > 1, the whole value otherwise."""
    if isinstance(t.layout, LocalLayout):
        return value[rank]
    if isinstance(t.layout, (NodeSliced, Sliced)):
        d, local = t.layout.dim, rank % per_node
        if d != 0:
            raise RuntimeFault(f"a node slice must slice dim 0 on GPUs, got dim {d}")
        n = value.shape[0]
        if n % (per_node * chunks):
            raise RuntimeFault(f"a node slice of {n} rows must split into {per_node} ranks x "
                               f"{chunks} chunks, got a remainder; pick sizes that divide")
        pieces = value.reshape(chunks, per_node, n // (per_node * chunks), *value.shape[1:])
        return np.ascontiguousarray(pieces[:, local]).reshape(n // per_node, *value.shape[1:])
    return value


class PipelineRun:
    """A PipelineStep bound to this rank (module docstring)."""

    def __init__(self, run: PlanRun, step: PipelineStep):
        drv = run.gpu.drv
        self.run_, self.step = run, step
        self.legs = [run.prepare(leg) for leg in step.legs]
        self.streams = [drv.Stream() for _ in self.legs]
        self.join = drv.Event(drv.event_flags.DISABLE_TIMING)
        self.done = [[drv.Event(drv.event_flags.DISABLE_TIMING) for _ in range(step.chunks)]
                     for _ in self.legs[:-1]]

    def run(self) -> None:
        """Enqueue one run: every leg's chunks on its stream, each after the leg before it."""
        C, run = self.step.chunks, self.run_
        self.join.record()  # on the legacy stream: after everything enqueued before
        for stream in self.streams:
            stream.wait_for_event(self.join)
        for c in range(C):
            for k, (leg, stream) in enumerate(zip(self.legs, self.streams)):
                if k:
                    stream.wait_for_event(self.done[k - 1][c])
                run.launch_chunk(leg, c, C, stream)
                if k < len(self.legs) - 1:
                    self.done[k][c].record(stream)
