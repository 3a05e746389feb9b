"""Computation: the roofline of a kernel's HBM bytes and flops (`Work`), and the Work of
elementwise statements, MatMuls and reductions."""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from codegen.work import expr_dropouts, expr_flops
from cost_model.collectives import smax, smin
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


def io_work(ctx: CostContext, reads, writes, flops=0) -> Work:
    """The Work of a kernel that reads the values named in `reads` and writes those in
    `writes` (this rank's part of each), with the bytes of 2-byte elements counted apart."""
    def f16(names):
        return sum((ctx.local_nbytes(n) for n in names if ctx.types[n].dtype.nbytes == 2), 0)

    read = sum((ctx.local_nbytes(n) for n in reads), 0)
    write = sum((ctx.local_nbytes(n) for n in writes), 0)
    return Work(read + write, flops, write_bytes=write, f16_read_bytes=f16(reads),
                f16_write_bytes=f16(writes))


def elementwise_work(ctx: CostContext, stmts, produced_inside=frozenset()) -> Work:
    """HBM traffic and flops of elementwise statements (and axis reductions, row kernels) run as
    one kernel: each tensor read from HBM once (values produced inside the kernel are not
    re-read; a row kernel keeps a row in registers between its passes), each result written
    once."""
    reads, writes, flops, dropouts = {}, {}, 0, 0
    dtype = "f32"
    inside = set(produced_inside)
    for s in stmts:
        expr = s.op.expr
        out = s.out.name
        elements = iteration_numel(ctx, s)
        for name in ir.expr_refs(expr):
            if name not in inside:
                # An elementwise statement on a slice reads only that slice of a Replicated
                # operand (GPU run 14: Adam's rs-c-ag updates measured at the slice's bytes);
                # broadcast operands (a bias, a scalar) are read whole.
                slice_bytes = elements * ctx.types[name].dtype.nbytes
                reads[name] = smin(ctx.local_nbytes(name), slice_bytes)
        writes[out] = ctx.local_nbytes(out)
        # an axis reduction also combines each element into its row's accumulator
        combine = 1 if isinstance(s.op, ir.ReduceAxis) else 0
        flops = flops + (expr_flops(expr) + combine) * elements
        dropouts = dropouts + expr_dropouts(expr) * elements
        dtype = s.out.type.dtype.name
        inside.add(out)

    def f16(table):
        return sum((n for name, n in table.items() if ctx.types[name].dtype.nbytes == 2), 0)

    return Work(sum(reads.values()) + sum(writes.values()), flops, dtype, sum(writes.values()),
                f16(reads), f16(writes), dropouts)


def iteration_numel(ctx: CostContext, s: ir.Stmt):
    """Elements one rank computes for an elementwise statement: its result's, or for an axis
    reduction (ReduceAxis) its input's, which it reads whole to write one value per row."""
    if isinstance(s.op, ir.ReduceAxis):
        t = s.op.input_type(ctx.types, str(s.op))
        return ctx.size(sympy.Mul(*t.local_shape()))
    return ctx.local_numel(s.out.name)


def matmul_work(ctx: CostContext, s: ir.Stmt) -> Work:
    """HBM traffic and flops of a MatMul on this rank: both operands read, the result written
    once, 2 flops per multiply-add at the first operand's dtype's rate."""
    a, b = s.op.a, s.op.b
    ta = ctx.types[a]
    k_local = ctx.size(ta.local_shape()[-1])
    flops = 2 * ctx.local_numel(s.out.name) * k_local
    return Work(ctx.local_nbytes(a) + ctx.local_nbytes(b) + ctx.local_nbytes(s.out.name),
                flops, ta.dtype.name)


def matmul_epilogue_works(ctx: CostContext, s: ir.Stmt) -> list[Work]:
    """The kernels of a fused MatMul + epilogue region (ir.Fused kind "matmul"), in order.

    An epilogue the GEMM library runs (ir.library_epilogue: bias, bias + ReLU, bias + GeLU):
    one GEMM that reads the bias and writes the epilogue's result instead of the product, so
    the product's round trip through HBM (written by the GEMM, read back by a kernel: 2 x its
    bytes) is saved. Any other epilogue: the GEMM, then one kernel computing every epilogue
    statement from the product in registers (what unfused statements would cost, less the
    intermediate values' round trips)."""
    mm, *epilogue = s.op.body
    gemm = matmul_work(ctx, mm)
    lib = ir.library_epilogue(s.op.body, ctx.types)
    if lib is None:
        return [gemm, elementwise_work(ctx, epilogue)]
    n = ctx.local_numel(mm.out.name)
    extra = Work(ctx.local_nbytes(lib.bias) + ctx.local_nbytes(epilogue[0].out.name)
                 - ctx.local_nbytes(mm.out.name), expr_flops(epilogue[0].op.expr) * n)
    return [gemm + extra]


def reduction_work(ctx: CostContext, s: ir.Stmt) -> Work:
    """The Work of a ReduceTensor or Norm on this rank's part of its input: one read and two
    flops per element (the combine of the ranks' partials is priced apart,
    `comm.norm_combine_s`)."""
    return Work(ctx.local_nbytes(s.op.x), 2 * ctx.local_numel(s.op.x))


def index_work(ctx: CostContext, s: ir.Stmt) -> Work:
    """The Work of an index op's kernel on this rank (design decision 106). A Gather reads its
    ids and the rows it picks (its output's bytes: a masked row is a zero, not read, so this
    is the most it reads) and writes its output; no flops. A TopK reads its input once and
    writes its k values or indices a row; each lane inserts each element into its sorted k
    best, k comparisons an element."""
    out = s.out.name
    if isinstance(s.op, ir.Gather):
        read = ctx.local_nbytes(s.op.ids) + ctx.local_nbytes(out)
        write = ctx.local_nbytes(out)
        half = ctx.local_nbytes(out) if s.out.type.dtype.nbytes == 2 else 0
        return Work(read + write, 0, s.out.type.dtype.name, write, half, half)
    x = s.op.x
    half_in = ctx.local_nbytes(x) if ctx.types[x].dtype.nbytes == 2 else 0
    half_out = ctx.local_nbytes(out) if s.out.type.dtype.nbytes == 2 else 0
    return Work(ctx.local_nbytes(x) + ctx.local_nbytes(out), s.op.k * ctx.local_numel(x),
                ctx.types[x].dtype.name, ctx.local_nbytes(out), half_in, half_out)


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
