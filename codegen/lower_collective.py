"""Lowering fused collectives (FusedAllReduce, FusedReduceScatter, FusedAllGather regions) to
kernels that reduce and gather over NVLink by peer loads or stores, one kernel per phase,
and the stores a fused kernel makes into a Send's destination.
"""

from __future__ import annotations

from dataclasses import replace

import sympy

from codegen.kernel_builder import KernelBuilder
from codegen.lower_elementwise import phases_after, slice_loc
from codegen.lower_norm import finish_step
from codegen.lower_prologue import prologue_reduce_scatter
from codegen.plan import CHUNK, MAX_BLOCKS, RANK, KernelStep, fault
from codegen.planner import REDUCE_NAMES, Planner, c_ident, c_type_of
from codegen.spec import Load, Param, Push, Store, mangle
from workbench import ir
from workbench.options import CodegenOptions
from workbench.types import Sliced
from workbench.verify import prologue_length


def fused_phases(leaves: list[ir.Stmt]) -> list[int]:
    """Launch index of each leaf of a fused region: a leaf that reads a norm runs one launch
    after the norm's partial sums (the grid-wide, cross-GPU reduction sits in between)."""
    return phases_after(leaves, (ir.Norm, ir.ReduceTensor))


def fused_collective_steps(pl: Planner, stmt: ir.Stmt, first: int, opts: CodegenOptions,
                           chunks: int = 1, chunked_slices: bool = False) -> list[KernelStep]:
    """A fused collective region as launches: one kernel per phase (see fused_phases), each
    followed by the finishing kernel of the norms it accumulated. Without norms: one kernel."""
    leaves = list(stmt.leaves())
    phases = fused_phases(leaves)
    what = f"statement {stmt.name} ({stmt.op})"
    if phases != sorted(phases):
        raise fault(f"{what}: a fused region must compute each norm's users after every "
                    f"statement the norm does not wait for, got launch order {phases}")
    names = {leaf.out.name: p for leaf, p in zip(leaves, phases)}
    for leaf, p in zip(leaves, phases):
        for n in leaf.op.operands():
            if n in names and names[n] < p:
                pl.spill.add(n)
    steps = []
    for p in range(phases[-1] + 1):
        part = [(first + k, leaf) for k, (leaf, q) in enumerate(zip(leaves, phases)) if q == p]
        step, pending = collective_kernel(pl, stmt, part, opts,
                                          tag=f"_{p}" if p else "", chunks=chunks,
                                          chunked_slices=chunked_slices)
        steps.append(step)
        if pending:
            steps.append(finish_step(pl, pending))
    return steps


def collective_kernel(pl: Planner, stmt: ir.Stmt, part, opts: CodegenOptions,
                      tag: str = "", chunks: int = 1,
                      chunked_slices: bool = False) -> tuple[KernelStep, list]:
    """FusedAllReduce / FusedReduceScatter / FusedAllGather / FusedSend: ReduceScatter by
    peer loads, the computation on this rank's slice in registers, AllGather by peer stores
    or a Send by stores into the next stage's buffer, one kernel; `part` is the (leaf index,
    leaf) list of one launch of the region. Also the norms' pending finishing work."""
    op: ir.Fused = stmt.op
    leaves = [leaf for _, leaf in part]
    what = f"statement {stmt.name} ({op})"
    # The elements the launch walks: a leading norm or ReduceTensor walks its input (its own
    # result is one scalar), e.g. LAMB's w_norm, u_norm before the update they scale.
    lead = leaves[0]
    domain = (pl.types[lead.op.x] if isinstance(lead.op, (ir.Norm, ir.ReduceTensor))
              else lead.out.type)
    # Computation before the ReduceScatter (lower_prologue): the kernel walks the reduced slice.
    n_pro = prologue_length(leaves)
    if n_pro:
        domain = leaves[n_pro].out.type
    rooted = [leaf.op.root for leaf in leaves if isinstance(leaf.op, (ir.Reduce, ir.Broadcast))]
    collective = any(isinstance(leaf.op, (ir.ReduceScatter, ir.AllGather)) for leaf in leaves)
    if collective and not (isinstance(domain.layout, Sliced) and domain.layout.dim == 0):
        raise fault(f"{what}: a fused collective must compute on dim-0 slices, got "
                    f"{domain.layout}")
    kb = KernelBuilder(pl, domain, what, chunks, chunked_slices)
    if n_pro:
        kb._unchunked("computation before its ReduceScatter")
        prologue_reduce_scatter(kb, part[:n_pro], part[n_pro])
    for index, leaf in part[n_pro + (1 if n_pro else 0):]:
        lop = leaf.op
        if isinstance(lop, ir.ReduceScatter):
            if lop.dim != 0:
                raise fault(f"{what}: ReduceScatter must scatter dim 0, got {lop.dim}")
            src = pl.locs[lop.x]
            var = f"a_{c_ident(leaf.out.name)}"
            ctype = c_type_of(pl.types[lop.x])
            off = kb._c(src.offset + kb.slice_base)
            if opts.collective_mode == "pull":
                srcs = tuple(f"{p} + ({off})" for p in kb.peer_params(src.buffer, const=True))
            else:
                gptr = kb.buf_param(src.buffer, const=True)
                stage = f"stage_{c_ident(lop.x)}"
                pl.add_buffer(stage, pl.types[lop.x].dtype.name, pl.P * kb.extent, peer=True)
                speers = kb.peer_params(stage, const=False)
                # Read the local staging buffer through a plain pointer: peers write it during
                # this launch (before the barrier), so no __restrict__ / read-only-cache path.
                local = f"p_{stage}_local"
                kb.params[local] = Param(local, f"const {ctype}* {local}", "buf", stage)
                n = kb._c(kb.extent)
                srcs = tuple(f"(rank == {k} ? {gptr} + ({off}) : {local} + {k}LL * ({n}))"
                             for k in range(pl.P))
                # This launch's rows of the source: rank q's part starts q * extent later.
                chunk_base = kb.slice_base.subs(RANK, 0)
                kb.pushes.append(Push(ctype, f"{gptr} + ({kb._c(src.offset + chunk_base)})",
                                      speers))
            kb.reduced(leaf, index, Load(var, ctype, "reduce", "", off, peers=srcs,
                                         reduce=REDUCE_NAMES[lop.op]))
        elif isinstance(lop, ir.Reduce):
            # The root loads the whole input from every rank (its own included) and reduces
            # it in registers; peer loads (pull) whatever the collective mode.
            src = pl.locs[lop.x]
            off = kb._c(src.offset)
            srcs = tuple(f"{p} + ({off})" for p in kb.peer_params(src.buffer, const=True))
            kb.reduced(leaf, index, Load(f"a_{c_ident(leaf.out.name)}",
                                         c_type_of(pl.types[lop.x]), "reduce", "", off,
                                         peers=srcs, reduce=REDUCE_NAMES[lop.op]))
        elif isinstance(lop, ir.Broadcast):
            # The root stores the value computed here into every rank's buffer (its own too).
            if lop.x not in kb.regs:
                raise fault(f"{what}: a fused Broadcast must send a value computed in the "
                            f"kernel, got '{lop.x}'")
            dst = pl.new_buffer(leaf.out.name, pl.local_numel(leaf.out.name))
            pl.locs[leaf.out.name] = dst
            kb.regs[leaf.out.name] = kb.regs[lop.x]
            peers = kb.peer_params(dst.buffer, const=False)
            kb.stores.append(Store(kb.regs[lop.x], c_type_of(leaf.out.type), "",
                                   kb._c(dst.offset), peers, False))
        elif isinstance(lop, ir.AllGather):
            dst, self_stored = kb.gathered(leaf, index)
            peers = kb.peer_params(dst.buffer, const=False)
            kb.stores.append(Store(kb.regs[lop.x], c_type_of(leaf.out.type), "",
                                   kb._c(dst.offset + kb.slice_base), peers, self_stored))
        elif isinstance(lop, ir.ELEMENTWISE_OPS):
            kb.compute(leaf, index)
        elif isinstance(lop, ir.Slice):
            if lop.x in kb.regs:
                raise fault(f"{what}: a fused Slice must view a tensor in memory, got "
                            f"'{lop.x}' computed in the kernel")
            pl.locs[leaf.out.name] = slice_loc(pl, leaf, what)
        elif isinstance(lop, (ir.Norm, ir.ReduceTensor)):
            kb.norm(leaf)
        elif isinstance(lop, ir.Send) and op.kind == "send":
            send_store(kb, leaf, what)
        else:
            raise fault(f"{what}: a fused collective may hold ReduceScatter, Reduce, Compute, "
                        f"Update, Slice, Norm, ReduceTensor, AllGather and Broadcast (and a "
                        f"fused Send its Send), got {lop}")
    extra, flags_name = [], ""
    if collective or rooted:
        flags_name = f"flags_{c_ident(stmt.name.split(',')[0])}{tag}"
        pl.add_buffer(flags_name, "u32", sympy.Integer(2 * MAX_BLOCKS * pl.P), peer=True)
        extra = [Param(f"flags{k}", f"uint32_t* flags{k}", "flags", flags_name, k)
                 for k in range(pl.P)]
        extra.append(Param("epoch", "uint32_t epoch", "epoch"))
    kind, template = "collective", "fused_collective.cu.j2"
    if not (collective or rooted) and op.kind != "send":
        # A launch of computation only (what reads a ReduceTensor's or a norm's cross-rank
        # value, with no gather after it): a streaming kernel, no barriers.
        kind, template = "elementwise", "elementwise.cu.j2"
    if op.kind == "send":
        kind, template = "send", "fused_send.cu.j2"
        extra += send_signal_params(kb, leaves, what)
    spec = kb.spec(kind, template, pl.P, extra,
                   f"Fused{op.kind.capitalize()}: " + "; ".join(
                       f"{s.name} = {s.op}" for s in leaves), kb.vec_types(), opts.unroll)
    if rooted:
        # Only the root computes; the other ranks' blocks serve their inputs (a Reduce) or
        # receive (a Broadcast) and meet the root's blocks at the two barriers.
        spec = mangle(replace(spec, extent=f"(rank == {rooted[0]} ? {spec.extent} : 0LL)"))
    return KernelStep(spec, tuple(s.name for s in leaves), flags_name, kb.extent), kb.pending


def send_names(out: str) -> tuple[str, str, str]:
    """Buffers of a fused Send of `out`: the receiver's flags (one per chunk), the sender's
    count of finished blocks (one per chunk), and the sender's ack from the receiver."""
    return f"sendflags_{c_ident(out)}", f"sendcount_{c_ident(out)}", f"sendack_{c_ident(out)}"


def send_store(kb: KernelBuilder, leaf: ir.Stmt, what: str) -> None:
    """The Send leaf of a fused Send: store the value (registers, or loaded) straight into a
    fresh buffer of the destination stage on this local rank, at this launch's part of it
    (parts in chunk order: an overlapped Send of slices leaves chunk c's part at c * extent)."""
    pl, op, out = kb.pl, leaf.op, leaf.out
    if not ir.proven_equal(pl.local_numel(out.name), kb.domain_numel):
        raise fault(f"{what}: a fused Send must send the kernel's domain of "
                    f"{kb.domain_numel} elements per rank, got {out.type}")
    var, vec = kb.operand(op.x)
    if not vec:
        raise fault(f"{what}: a fused Send must send a tensor, got the scalar '{op.x}'")
    dst = pl.new_buffer(out.name, pl.local_numel(out.name))
    pl.locs[out.name] = dst
    ptr = kb.remote_param(dst.buffer, pl.stage_of[op.dst])
    offset = dst.offset + (CHUNK * kb.extent if kb.chunks > 1 else 0)
    kb.stores.append(Store(var, c_type_of(out.type), ptr, kb._c(offset)))
    kb.regs[out.name] = var


def send_signal_params(kb: KernelBuilder, leaves, what: str) -> list[Param]:
    """Parameters of a fused Send's handshake: the receiver's flag array (remote), the
    sender's block counter and ack (local), and the run's sequence number."""
    sends = [leaf for leaf in leaves if isinstance(leaf.op, ir.Send)]
    if len(sends) != 1 or sends[0] is not leaves[-1]:
        raise fault(f"{what}: a fused Send must end with its one Send, got "
                    f"{len(sends)} Sends in {', '.join(s.name for s in leaves)}")
    pl, send = kb.pl, sends[0]
    flags, count, ack = send_names(send.out.name)
    dst = pl.stage_of[send.op.dst]
    pl.add_buffer(flags, "u32", kb.chunks, peer=True, group=dst)
    pl.add_buffer(count, "u32", kb.chunks)
    pl.add_buffer(ack, "u32", 1, peer=True)
    return [Param("sendflags", "uint32_t* sendflags", "remote", flags, dst),
            Param("sendcount", "uint32_t* sendcount", "buf", count),
            Param("sendack", "const uint32_t* sendack", "buf", ack),
            Param("seq", "uint32_t seq", "seq")]

