"""Peak memory of one rank: what a program keeps on each GPU at its fullest moment, against
the GPU's capacity (`GPU.hbm_capacity_bytes`).

Counted per rank, in bytes of each value's local part (a Sliced value is 1/P of it):
inputs (held by the caller for the whole step), every value from the statement that defines
it to its last use (outputs to the end), and NCCL's communication buffers while the program
calls NCCL. An Update writes into its target and a Slice is a view: neither allocates. A
fused kernel's values are counted as values (its peer windows are those buffers). This is a
liveness bound on allocation, not a model of the caching allocator's fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_model.ops.comm import COLLECTIVE_KINDS
from cost_model.ops.context import CostContext
from workbench import ir

# NCCL's staging buffers: NCCL_BUFFSIZE, 4 MiB by default (NCCL documentation, Environment
# Variables: NCCL_BUFFSIZE "Default: 4194304"), per channel for the ring's receive and send
# connections: 2 x channels x 4 MiB for the Simple protocol (LL and LL128 buffers, smaller,
# are left out).
NCCL_BUFFSIZE_BYTES = 4 * 2**20


@dataclass(frozen=True)
class MemoryUse:
    """A rank's peak memory (bytes), its parts at the peak, and the GPU's capacity."""

    peak_bytes: float
    inputs_bytes: float
    values_bytes: float  # state, outputs and temporaries alive at the peak
    comm_buffers_bytes: float
    capacity_bytes: float

    @property
    def fits(self) -> bool:
        """Whether the peak fits in the GPU's memory."""
        return self.peak_bytes <= self.capacity_bytes

    def why_not(self) -> str:
        """The sentence a row that does not fit carries."""
        gib = 2**30
        return (f"peak memory per rank must fit the GPU's {self.capacity_bytes / gib:.4g} GiB, "
                f"got {self.peak_bytes / gib:.4g} GiB (inputs {self.inputs_bytes / gib:.4g}, "
                f"values {self.values_bytes / gib:.4g}, NCCL buffers "
                f"{self.comm_buffers_bytes / gib:.4g}); lower the sizes or keep state sliced")


def _allocates(s: ir.Stmt) -> bool:
    return not isinstance(s.op, (ir.Update, ir.Slice))


def peak_memory(ctx: CostContext) -> MemoryUse:
    """The peak memory per rank of `ctx.program` with its bound sizes (see module docstring)."""
    program = ctx.program
    stmts = program.stmts
    inputs = sum(float(ctx.local_nbytes(v.name)) for v in program.inputs)
    outputs = {v.name for v in program.outputs}
    last_use: dict[str, int] = {}
    for i, s in enumerate(stmts):
        for leaf in s.leaves():
            for name in leaf.op.operands():
                last_use[name] = i
    born: list[tuple[str, int]] = []
    for i, s in enumerate(stmts):
        for leaf in s.leaves():
            if _allocates(leaf):
                born.extend((out.name, i) for out in leaf.outs)
    calls_nccl = any(type(leaf.op) in COLLECTIVE_KINDS for s in stmts for leaf in s.leaves()
                     if not isinstance(s.op, ir.Fused))
    comm = 2 * ctx.cluster.nccl.max_channels * NCCL_BUFFSIZE_BYTES if calls_nccl else 0.0
    peak_values = 0.0
    for i in range(len(stmts)):
        live = sum(float(ctx.local_nbytes(name)) for name, b in born
                   if b <= i and (name in outputs or last_use.get(name, b) >= i))
        peak_values = max(peak_values, live)
    return MemoryUse(inputs + peak_values + comm, inputs, peak_values, comm,
                     ctx.cluster.gpu.hbm_capacity_bytes)
