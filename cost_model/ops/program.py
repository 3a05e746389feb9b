"""A whole program's cost: its statements one after another on each rank, the host issuing
NCCL calls ahead of the GPU, and the bandwidth-only lower bound."""

from __future__ import annotations

from collections.abc import Mapping

import sympy

from cost_model.hardware import Cluster
from cost_model.ops.context import (  # noqa: F401  (ProgramCost: re-exported here)
    CostContext,
    ProgramCost,
    add_busy,
    host_overlapped_total,
)
from cost_model.ops.rules import stmt_cost
from workbench import ir
from workbench.options import CodegenOptions


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
