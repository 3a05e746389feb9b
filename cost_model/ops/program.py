"""A whole program's cost: its statements one after another on each rank, the host issuing
NCCL calls ahead of the GPU, and the bandwidth-only lower bound."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sympy

from cost_model.collectives import smax
from cost_model.hardware import Cluster
from cost_model.ops.context import CostContext, add_busy
from cost_model.ops.rules import stmt_cost
from workbench import ir
from workbench.options import CodegenOptions


@dataclass(frozen=True)
class ProgramCost:
    """Closed-form time of a whole program (statements run one after another on each rank),
    the per-statement costs, and the bandwidth-only lower bound."""

    time_s: object
    stmts: tuple
    busy_s: dict

    @property
    def lower_bound_s(self):
        """No schedule of these kernels on this machine can be faster: each resource must be
        busy this long and serves one kernel at a time."""
        return smax(*self.busy_s.values()) if self.busy_s else 0


def host_overlapped_total(costs, symbolic: bool = False):
    """Time of statements run one after another on a stream, with the host issuing them ahead.

    CUDA and NCCL calls are asynchronous: the host pays a call's issue cost (`host_s`) while
    the GPU is still running earlier work, so the GPU starts a statement at the later of the
    moment it is free and the moment the host has issued it. A single call therefore costs
    host + GPU time (what a CUDA-event-timed microbenchmark sees), while in a sequence most
    of the host cost hides behind the kernels before it. The simulator runs the same rule.
    """
    zero = sympy.Integer(0) if symbolic else 0.0
    host, gpu = zero, zero
    for c in costs:
        host = host + c.host_s
        start = sympy.Max(gpu, host) if symbolic else max(gpu, host)
        gpu = start + (c.time_s - c.host_s)
    return gpu


def program_cost(program: ir.Program, cluster: Cluster, bound: Mapping[sympy.Symbol, int],
                 symbolic: bool = False, options: CodegenOptions | None = None) -> ProgramCost:
    """The cost model's prediction for a program on a cluster, generated with the codegen
    `options` (None: the defaults). `bound`'s keys may be size names or any sympy Symbols of
    those names (ir.Program.sizes_by_symbol)."""
    bound = program.sizes_by_symbol(bound)
    ctx = CostContext(program, cluster, bound, symbolic, options=options or CodegenOptions())
    costs = tuple(stmt_cost(ctx, s) for s in program.stmts)
    total = host_overlapped_total(costs, symbolic)
    busy: dict = {}
    for c in costs:
        busy = add_busy(busy, c.busy_s)
    return ProgramCost(total, costs, busy)
