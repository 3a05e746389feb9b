"""The price of a pipelined hierarchy (workbench.transforms.PipelineHierarchy): the three legs
of a hierarchical split, each cut in `chunks` pieces and run as a pipeline.

Leg 1 (the node ReduceScatter) and leg 3 (the node gather, fused with the update) move their
bytes over NVLink; leg 2 (the AllReduce across nodes) over the NIC. Each piece of a leg is its
own NCCL call or kernel launch, so it pays the leg's fixed cost (`stmt_fixed_s` of a piece:
NCCL's per-call cost and the protocol latency of the plan a piece gets, a fused kernel's
fixed cost) again, less NCCL's per-call host cost, which the host pays issuing the pieces
ahead of the GPU (design note 9; the runtime enqueues every piece without waiting). With
per-piece times a1, a2, a3, the first piece takes a1 + a2 + a3 and each further one the
period of the busiest resource: NVLink carries legs 1 and 3 of different pieces one after
another (a1 + a3), the NIC leg 2 (a2), the host the pieces' NCCL calls (h). So

    T = a1 + a2 + a3 + (chunks - 1) * max(a1 + a3, a2, h)

where an NCCL leg's piece is priced by the plan NCCL picks for a piece (its protocol, and
every step's latency again: splitting a ring into pieces repeats its 2(n-1) steps).

which the simulator reproduces with the legs as processes on the GPU's NVLink and NIC
(simulator.rules). Where the NIC leg dominates, the node legs hide behind it and the
schedule takes about the network's time, NCCL's flat algorithms' floor too.
"""

from __future__ import annotations

from cost_model.collectives import smax
from cost_model.ops.context import OpCost, add_busy


def pipelined(legs, chunks: int, symbolic: bool = False) -> OpCost:
    """Three legs of (seconds of one piece on the GPU, the whole leg's OpCost, NCCL's host
    cost of one piece) as a pipeline of `chunks` pieces (module docstring): a statement's
    legs (`pipeline_cost`) or a plan's PipelineStep (cost_model.plan_cost). The host issues
    every piece's NCCL calls in order, so the period is also at least their host cost."""
    (a1, c1, h1), (a2, c2, h2), (a3, c3, h3) = legs
    t = a1 + a2 + a3 + (chunks - 1) * smax(a1 + a3, a2, h1 + h2 + h3)
    # the leg across nodes keeps the NIC busy, not NVLink: its own resource in the bound
    nic = {("nic" if k == "link" else k): v for k, v in c2.busy_s.items()}
    busy = add_busy(add_busy(c1.busy_s, nic), c3.busy_s)
    slow = c2 if symbolic or float(a2) >= float(a1 + a3) else \
        (c1 if float(a1) >= float(a3) else c3)
    return OpCost(t, busy, slow.bottleneck)
