"""Peak memory of one rank against the GPU's capacity (`GPU.hbm_capacity_bytes`): the record
(`MemoryUse`) and NCCL's staging buffers. What a schedule holds is what its plan allocates
(`cost_model.plan_memory`, decision 104); the IR's liveness bound that stood in for a
schedule without a plan went with the last reader that had none.
"""

from __future__ import annotations

from dataclasses import dataclass

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
