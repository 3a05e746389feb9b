"""Computation: the roofline of a kernel's HBM bytes and flops (`Work`), and the Work of
elementwise statements, MatMuls and reductions."""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from cost_model.collectives import smax
from cost_model.hardware import Cluster
from cost_model.ops.context import CostContext, OpCost
from workbench import ir


def roofline_s(cluster: Cluster, hbm_bytes, flops, dtype_name: str = "f32",
               sm_fraction: float = 1.0, write_bytes=None, f16_read_bytes=0,
               f16_write_bytes=0):
    """Busy time of a kernel moving `hbm_bytes` and doing `flops` with a fraction of the SMs.

    With fewer SMs (a communication kernel holds some) the arithmetic rate falls in proportion;
    HBM bandwidth stays saturated down to about half the SMs (a streaming kernel needs enough
    loads in flight, not all SMs; an assumption, consistent with copy kernels reaching full
    bandwidth at half occupancy), and falls in proportion below that. `write_bytes` (of
    hbm_bytes) prices writes at the GPU's write rate where the spec splits reads and writes;
    `f16_read_bytes` / `f16_write_bytes` are the bytes of 2-byte elements among the reads and
    writes (`GPU.hbm_time_s`)."""
    gpu = cluster.gpu
    mem_scale = min(1.0, 2.0 * sm_fraction)
    return smax(gpu.hbm_time_s(hbm_bytes, write_bytes, f16_read_bytes, f16_write_bytes)
                / mem_scale, flops / (gpu.flops_for(dtype_name) * sm_fraction))


@dataclass(frozen=True)
class Work:
    """What a kernel (or its computation part) does: HBM bytes, flops, the flops' dtype, how
    many of the bytes are writes (None: not known; priced at the flat HBM bandwidth), how
    many of the reads and of the writes are of 2-byte elements (f16, bf16), and how many
    dropout masks it computes (elements x masks per element)."""

    hbm_bytes: object
    flops: object
    dtype: str = "f32"
    write_bytes: object = None
    f16_read_bytes: object = 0
    f16_write_bytes: object = 0
    dropout_elements: object = 0

    def __add__(self, other: Work) -> Work:
        writes = None if self.write_bytes is None or other.write_bytes is None \
            else self.write_bytes + other.write_bytes
        return Work(self.hbm_bytes + other.hbm_bytes, self.flops + other.flops, self.dtype,
                    writes, self.f16_read_bytes + other.f16_read_bytes,
                    self.f16_write_bytes + other.f16_write_bytes,
                    self.dropout_elements + other.dropout_elements)

    def scaled(self, factor: float) -> Work:
        """The same kernel on `factor` of the data (numbers: the simulator's chunks)."""
        writes = None if self.write_bytes is None else float(self.write_bytes) * factor
        return Work(float(self.hbm_bytes) * factor, float(self.flops) * factor, self.dtype,
                    writes, float(self.f16_read_bytes) * factor,
                    float(self.f16_write_bytes) * factor, float(self.dropout_elements) * factor)


def work_s(cluster: Cluster, work: Work, sm_fraction: float = 1.0):
    """`roofline_s` of a Work, plus its dropout masks' hashing (`GPU.dropout_element_s`,
    measured to add to the streaming time, not to hide under it; slower on fewer SMs): the
    busy time of the kernel it describes on `sm_fraction` of the SMs (the simulator prices
    its computation chunks with this)."""
    streaming = roofline_s(cluster, work.hbm_bytes, work.flops, work.dtype, sm_fraction,
                           work.write_bytes, work.f16_read_bytes, work.f16_write_bytes)
    return dropout_s(cluster, work, sm_fraction) + streaming


def dropout_s(cluster: Cluster, work: Work, sm_fraction: float = 1.0):
    """Time a Work's dropout masks add to its kernel on `sm_fraction` of the SMs."""
    return work.dropout_elements * cluster.gpu.dropout_element_s / sm_fraction






def iteration_numel(ctx: CostContext, s: ir.Stmt):
    """Elements one rank computes for an elementwise statement: its result's, or for an axis
    reduction (ReduceAxis) its input's, which it reads whole to write one value per row."""
    if isinstance(s.op, ir.ReduceAxis):
        t = s.op.input_type(ctx.types, str(s.op))
        return ctx.size(sympy.Mul(*t.local_shape()))
    return ctx.local_numel(s.out.name)










def kernel_bound(cluster: Cluster, work: Work, sm_fraction: float = 1.0) -> str:
    """What bounds a computation kernel doing `work` on `sm_fraction` of the SMs: "sm" when
    its arithmetic takes longer than its memory traffic (a GEMM), else "hbm" (the hashing of
    dropout masks adds to a memory-bound kernel, so it does not make one SM-bound)."""
    busy = work_s(cluster, work, sm_fraction) - dropout_s(cluster, work, sm_fraction)
    mem = cluster.gpu.hbm_time_s(work.hbm_bytes, work.write_bytes, work.f16_read_bytes,
                                 work.f16_write_bytes) / min(1.0, 2.0 * sm_fraction)
    return "sm" if float(busy) > float(mem) * 1.0000001 else "hbm"


def compute_cost(ctx: CostContext, work: Work) -> OpCost:
    """The cost of a computation kernel doing `work` on all the SMs: a launch plus its
    roofline, memory or SM bound."""
    c = ctx.cluster
    busy = work_s(c, work)
    bottleneck = "hbm" if ctx.symbolic else kernel_bound(c, work)
    return OpCost(c.gpu.launch_latency_s + busy, {"hbm": busy}, bottleneck)
