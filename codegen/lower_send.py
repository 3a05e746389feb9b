"""Lowering Sends between pipeline stages: NCCL send/recv, and fused Sends whose kernel stores
into the next stage's buffer and signals it, with the receiver's wait kernel.
"""

from __future__ import annotations

import sympy

from codegen.lower_collective import collective_kernel, fused_phases, send_names
from codegen.plan import ChunkedStep, KernelStep, SendStep, fault
from codegen.planner import Planner, c_type_of, chunk_rows, sliced_dim0
from codegen.spec import KernelSpec, Param, mangle
from workbench import ir
from workbench.options import CodegenOptions


def p2p_step(pl: Planner, stmt: ir.Stmt) -> tuple[SendStep, tuple[int, int]]:
    """An unfused Send: NCCL send on the source stage, recv into a fresh buffer on the next."""
    op, out = stmt.op, stmt.out
    what = f"statement {out.name} ({op})"
    src = pl.locs.get(op.x)
    if src is None:
        raise fault(f"{what}: the value a Send sends must live in memory, got '{op.x}' in "
                    "registers")
    dst = pl.new_buffer(out.name, pl.local_numel(out.name))
    pl.locs[out.name] = dst
    c_type_of(out.type)
    g0, g1 = pl.stage_of[pl.types[op.x].group], pl.stage_of[op.dst]
    return SendStep(src, dst, dst.numel, out.type.dtype.name, out.name, g0, g1), (g0, g1)


def wait_step(pl: Planner, send: ir.Stmt, src: int) -> KernelStep:
    """The receiving end of a fused Send (one block, launched per chunk): ack the previous
    run, then wait for the sender's flag of this chunk."""
    flags, _, ack = send_names(send.out.name)
    params = (Param("sendflags", "const uint32_t* sendflags", "buf", flags),
              Param("sendack", "uint32_t* sendack", "remote", ack, src),
              Param("seq", "uint32_t seq", "seq"),
              Param("chunk", "long long chunk", "chunk"))
    spec = mangle(KernelSpec("wait", "recv_wait.cu.j2", pl.P, 1, "1LL", params, (), (), (),
                             comment=f"receive {send.out.name} = {send.op}: wait for the "
                                     "sender's flag"))
    return KernelStep(spec, (send.out.name,), flags, sympy.Integer(1))


def send_steps(pl: Planner, stmt: ir.Stmt, first: int, opts: CodegenOptions,
               chunks: int = 1) -> list[tuple[object, tuple[int, ...]]]:
    """A FusedSend region ([ReduceScatter] C* Send): the fused kernel on the source stage and
    the flag wait on the destination stage, as (step, stages) pairs; chunked (an overlap):
    both as ChunkedSteps of `chunks` launches."""
    leaves = list(stmt.leaves())
    what = f"statement {stmt.name} ({stmt.op})"
    if any(p for p in fused_phases(leaves)):
        raise fault(f"{what}: a fused Send must be one launch, got a norm whose users need a "
                    "second one; measure a schedule that does not fuse the norm")
    src = pl.group
    step, _ = collective_kernel(pl, stmt, list(enumerate(leaves, start=first)), opts,
                                chunks=chunks)
    send = leaves[-1]
    if chunks > 1 and sliced_dim0(send.out.type):
        uses = pl.uses.get(send.out.name, set()) - {pl.kernel_of[send.out.name]}
        if uses or any(v.name == send.out.name for v in pl.program.outputs):
            raise fault(f"{what}: an overlapped Send of slices leaves its parts in chunk "
                        f"order, so only an AllGather in the same overlap may read "
                        f"'{send.out.name}', got other uses; overlap it with its AllGather")
    dst = pl.stage_of[send.op.dst]
    wait = wait_step(pl, send, src)
    if chunks > 1:
        rows, per = chunk_rows(pl, leaves[0].out.type, chunks)
        return [(ChunkedStep(chunks, (step,), stmt.name, rows, per), (src,)),
                (ChunkedStep(chunks, (wait,), stmt.name, rows, per), (dst,))]
    return [(step, (src,)), (wait, (dst,))]

