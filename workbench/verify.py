"""`verify(program)`: definitions before use, shapes, dtypes, layouts, groups, divisibility.

Types are re-inferred from each op's rule and compared with the stored ones, so a transform that
builds a statement with a wrong type is caught where it is built. On failure the message names
the statement, where the user wrote it, and prints the program around it.
"""

from __future__ import annotations

import sympy

from workbench.errors import IllegalTransform, NotOnThisCluster, VerifyError, WorkbenchError
from workbench.ir import (
    FUSABLE_COMPUTATION,
    FUSED_KINDS,
    AllGather,
    AllReduce,
    AllToAll,
    Broadcast,
    Compute,
    Dropout,
    Fused,
    MatMul,
    Overlapped,
    Program,
    Reduce,
    ReduceAxis,
    ReduceScatter,
    Send,
    Stmt,
    Update,
    expr_nodes,
    format_program,
    proven_divisible,
)
from workbench.placement import Placement
from workbench.types import NodeSliced, Replicated, Sliced, TensorType

_ELEMENTWISE = (Compute, Update)


def fused_kind_of(body) -> str | None:
    """The fused kind whose pattern (see ir.Fused) the statements' ops match, or None."""
    ops = [s.op for s in body]
    if len(ops) < 2:
        return None
    if any(isinstance(o, AllToAll) for o in ops):  # an exchange with computation around it
        ok = sum(isinstance(o, AllToAll) for o in ops) == 1 and all(
            isinstance(o, (AllToAll, *_ELEMENTWISE)) for o in ops)
        return "alltoall" if ok else None
    if isinstance(ops[0], MatMul):  # a GEMM and its elementwise epilogue
        return "matmul" if all(isinstance(o, _ELEMENTWISE) for o in ops[1:]) else None
    head_reduce, ends_broadcast = isinstance(ops[0], Reduce), isinstance(ops[-1], Broadcast)
    if head_reduce or ends_broadcast:  # computation at the root of a Reduce / Broadcast
        middle = ops[int(head_reduce):len(ops) - int(ends_broadcast)]
        if not all(isinstance(o, _ELEMENTWISE) for o in middle):
            return None
        if head_reduce and ends_broadcast:
            return "reducebroadcast"
        return ("reduce" if head_reduce else "broadcast") if middle else None
    if isinstance(ops[0], AllReduce):  # the whole AllReduce, then rows computed on every rank
        rest = ops[1:]
        rows = any(isinstance(o, ReduceAxis) for o in rest)
        flat = getattr(ops[0], "sub", None) is None  # not a node-level (hierarchical) part
        ok = flat and rows and all(isinstance(o, (*_ELEMENTWISE, ReduceAxis)) for o in rest)
        return "allreduce" if ok else None
    if prologue_length(body):  # computation before a ReduceScatter (casts, scaling)
        return "reducescatter"
    head_rs = isinstance(ops[0], ReduceScatter)
    tail = len(ops)
    while tail > 0 and isinstance(ops[tail - 1], AllGather):
        tail -= 1
    n_gather = len(ops) - tail
    ends_send = isinstance(ops[-1], Send)
    middle = ops[int(head_rs):tail - int(ends_send and not n_gather)]
    if not all(isinstance(o, FUSABLE_COMPUTATION) for o in middle):
        return None
    if head_rs and n_gather:
        return "allreduce"
    if head_rs and ends_send:
        return "send"
    if head_rs:
        return "reducescatter" if middle else None
    if n_gather:
        return "allgather" if middle else None
    if ends_send:
        return "send" if middle else None
    # Axis reductions join a fused compute region: one row kernel computes a row's statistic
    # and the elementwise statements that read it (RMSNorm, LayerNorm, softmax).
    return "compute" if all(isinstance(o, (*_ELEMENTWISE, ReduceAxis)) for o in ops) else None


def prologue_length(body) -> int:
    """How many statements of a fused body run before its ReduceScatter as a prologue: the
    pattern `E+ ReduceScatter E*` (E elementwise: Compute, Update), a FusedReduceScatter that
    computes each rank's contribution and reduce-scatters it in one kernel; 0 otherwise."""
    ops = [s.op for s in body]
    first = next((i for i, o in enumerate(ops) if isinstance(o, ReduceScatter)), 0)
    if first == 0 or not all(isinstance(o, _ELEMENTWISE) for o in ops[:first]):
        return 0
    return first if all(isinstance(o, _ELEMENTWISE) for o in ops[first + 1:]) else 0


def _check_prologue(stmt: Stmt, env: dict[str, TensorType], what: str) -> None:
    """What a kernel can compute before its ReduceScatter, per element of its contribution
    (design note 78): each rank computes its whole contribution from its own memory and pushes
    slice q to rank q, so every prologue statement must be elementwise over the reduced
    tensor's shape, read tensors of that shape (or scalars) that are not sliced, draw no
    dropout mask, and feed the ReduceScatter only (its values are per destination, in
    registers, never read after the reduction)."""
    n = prologue_length(stmt.op.body)
    prologue, rs, after = stmt.op.body[:n], stmt.op.body[n], stmt.op.body[n + 1:]
    names = {p.out.name for p in prologue}
    if rs.op.x not in names:
        raise VerifyError(f"{what}: a fused ReduceScatter after computation must reduce a value "
                          f"that computation makes, got '{rs.op.x}'; fuse the statement that "
                          "computes it, or fuse only the ReduceScatter and what follows")
    x = prologue[[p.out.name for p in prologue].index(rs.op.x)].out.type
    if rs.op.dim != 0:
        raise VerifyError(f"{what}: a fused ReduceScatter after computation must scatter dim 0 "
                          f"(contiguous rows), got dim {rs.op.dim}; put the scattered dim first")
    _check_before(prologue, after, env, x, what, "a ReduceScatter", "scalars",
                  lambda t: not t.rank, "reduced", "the reduction")


def _check_before(before, after, env, x: TensorType, what: str, collective: str,
                  scalars: str, scalar_ok, shape_name: str, until: str) -> None:
    """The rules shared by computation fused before a ReduceScatter and before an AllToAll:
    operands are scalars (`scalar_ok`) or whole, unsliced tensors of the collective's input
    shape; no dropout mask (a hash of the global index, which the kernel does not walk); no
    statement after the collective reads a value computed before it."""
    names = {p.out.name for p in before}
    for p in before:
        for name in p.op.operands():
            t = env[name]
            ok = scalar_ok(t) if not t.rank else (
                list(t.shape) == list(x.shape) and not isinstance(t.layout, (Sliced, NodeSliced)))
            if not ok:
                raise VerifyError(
                    f"{what}: computation fused before {collective} must read {scalars} or "
                    f"whole tensors of the {shape_name} shape {list(x.shape)}, got '{name}' "
                    f"({t}) in {p.name}; compute it in a kernel of its own")
        if any(isinstance(e, Dropout) for e in expr_nodes(p.op.expr)):
            raise VerifyError(f"{what}: computation fused before {collective} must not draw a "
                              f"dropout mask, got one in {p.name}; apply it after {until} or "
                              "in a kernel of its own")
    for a in after:
        read = names & set(a.op.operands())
        if read:
            raise VerifyError(f"{what}: a value computed before a fused {collective.split()[-1]} "
                              f"must be read only up to {until}, got "
                              f"'{sorted(read)[0]}' read by {a.name}; compute {a.name} in a "
                              "kernel of its own")


def exchange_pushes(body) -> bool:
    """Whether a fused AllToAll (kind alltoall) pushes: computation before the exchange and
    none after it, so each rank computes its own rows and stores each block into its
    destination (the exchanged value crosses the links in its own dtype: a cast down moves
    the small type); otherwise each rank pulls its rows from their sources (design note 79)."""
    k = next(i for i, s in enumerate(body) if isinstance(s.op, AllToAll))
    return k > 0 and k == len(body) - 1


def _check_exchange(stmt: Stmt, env: dict[str, TensorType], what: str) -> None:
    """What a peer-memory AllToAll kernel (fused kind alltoall, design note 79) can compute
    around the exchange: each received row is loaded from its source rank, so the computation
    before the AllToAll runs on the source's rows as they are loaded: it must read scalars
    (Replicated: the same on every rank) or whole tensors of the exchanged shape, draw no
    dropout mask, and its values live in registers (read only up to the exchange, never stored:
    the rows belong to another rank). The exchange is over dim 0 (contiguous blocks)."""
    body = stmt.op.body
    k = next(i for i, s in enumerate(body) if isinstance(s.op, AllToAll))
    before, a2a, after = body[:k], body[k], body[k + 1:]
    names = {p.out.name for p in before}
    if a2a.op.dim != 0:
        raise VerifyError(f"{what}: a fused AllToAll must exchange dim 0 (contiguous blocks), "
                          f"got dim {a2a.op.dim}; put the exchanged dim first")
    x = env[a2a.op.x]
    if before and a2a.op.x not in names:
        raise VerifyError(f"{what}: the computation fused before an AllToAll must make the "
                          f"value it exchanges, got '{a2a.op.x}'; fuse only the AllToAll and "
                          "what follows it")
    for p in before:
        if isinstance(p.op, Update):
            raise VerifyError(f"{what}: computation fused before an AllToAll must compute new "
                              f"values, got the Update {p.name} (its target stays on its "
                              f"rank); update in a kernel of its own")
    _check_before(before, after, env, x, what, "an AllToAll", "Replicated scalars",
                  lambda t: not t.rank and t.layout == Replicated, "exchanged", "the exchange")


def _check_divisible(program: Program, t: TensorType, what: str) -> None:
    if isinstance(t.layout, Sliced):
        dim = t.shape[t.layout.dim]
        if not proven_divisible(dim, t.group.size, program.facts):
            raise VerifyError(
                f"{what}: Sliced({t.layout.dim}) dim {dim} must be provably divisible by the group "
                f"size {t.group.size}, got no proof; declare it, e.g. "
                f"Size(\"{dim}\", multiple_of={t.group.size})"
            )
    if isinstance(t.layout, NodeSliced):
        dim = t.shape[t.layout.dim]
        if not proven_divisible(dim, t.layout.per_node, program.facts):
            raise VerifyError(
                f"{what}: {t.layout} dim {dim} must be provably divisible by the "
                f"{t.layout.per_node} ranks per node, got no proof; declare the group size a "
                f"multiple of them (the hierarchical split adds that fact)")


def _where(stmt: Stmt) -> str:
    return f"{stmt.name} = {stmt.op}" + (f" (at {stmt.loc})" if stmt.loc else "")


def _verify_stmt(program: Program, stmt: Stmt, env: dict[str, TensorType]) -> None:
    what = _where(stmt)
    if isinstance(stmt.op, (Fused, Overlapped)):
        if isinstance(stmt.op, Fused):
            if stmt.op.kind not in FUSED_KINDS:
                raise VerifyError(f"{what}: fused kind must be one of {FUSED_KINDS}, got "
                                  f"{stmt.op.kind!r}")
            if fused_kind_of(stmt.op.body) != stmt.op.kind:
                raise VerifyError(f"{what}: body does not match the pattern of a fused "
                                  f"{stmt.op.kind} kernel (see ir.Fused)")
            if stmt.op.kind == "alltoall":
                _check_exchange(stmt, {**env, **{v.name: v.type for v in stmt.outs}}, what)
            if stmt.op.kind == "reducescatter" and prologue_length(stmt.op.body):
                _check_prologue(stmt, {**env, **{v.name: v.type for v in stmt.outs}}, what)
        elif (len(stmt.op.body) != 2 and not is_hierarchy_pipeline(stmt.op)) \
                or stmt.op.chunks < 1:
            raise VerifyError(f"{what}: an overlap must hold a producer and a consumer (or the "
                              f"three legs of a pipelined hierarchy) and chunks >= 1, got "
                              f"{len(stmt.op.body)} statements, chunks={stmt.op.chunks}")
        inner_outs = []
        for inner in stmt.op.body:
            _verify_stmt(program, inner, env)
            inner_outs += inner.outs
        if tuple(inner_outs) != stmt.outs:
            raise VerifyError(f"{what}: a region must define exactly its body's values")
        return
    for name in stmt.op.operands():
        if name not in env:
            raise VerifyError(f"{what}: value '{name}' must be defined before use")
    inferred = stmt.op.infer(env, what)
    (out,) = stmt.outs
    if out.name in env:
        raise VerifyError(f"{what}: value '{out.name}' must be defined once, got a redefinition")
    if inferred != out.type:
        raise VerifyError(f"{what}: stored type must be the inferred {inferred}, got {out.type}")
    _check_divisible(program, out.type, what)
    if isinstance(stmt.op, AllToAll):
        dim = out.type.shape[stmt.op.dim]
        if not proven_divisible(dim, out.type.group.size, program.facts):
            raise VerifyError(
                f"{what}: an AllToAll's dim {stmt.op.dim} ({dim}) must be provably divisible by "
                f"the group size {out.type.group.size} (one block per rank), got no proof; "
                f"declare it, e.g. Size(\"{dim}\", multiple_of={out.type.group.size})")
    env[out.name] = out.type


def verify(program: Program, placement: Placement | None = None) -> Program:
    """Check every invariant of `program`; return it unchanged, or raise a WorkbenchError whose
    message names the statement and shows the program with that statement marked '>>'.

    Given a `placement` (a cluster's nodes), also refuse what that cluster cannot run
    (NotOnThisCluster): a fused collective kernel moves bytes by peer loads and stores (or
    copy engines), which end at the node's NVLink domain."""
    env: dict[str, TensorType] = {}
    for v in program.inputs:
        if v.name in env:
            raise VerifyError(f"input '{v.name}' must be declared once, got it twice")
        _check_divisible(program, v.type, f"input {v.name}")
        env[v.name] = v.type
    for stmt in program.stmts:
        try:
            _verify_stmt(program, stmt, env)
        except WorkbenchError as e:
            listing = format_program(program, mark=stmt.outs[0].name)
            raise type(e)(f"{e}\n\nin program:\n{listing}") from None
    for v in program.outputs:
        if env.get(v.name) != v.type:
            raise VerifyError(f"output '{v.name}' must be a value of the program with type "
                              f"{env.get(v.name)}, got {v.type}")
    if placement is not None:
        for stmt in program.stmts:
            try:
                check_pipeline_chunks(stmt, placement)
                check_runnable(stmt, placement)
            except NotOnThisCluster as e:
                listing = format_program(program, mark=stmt.outs[0].name)
                raise NotOnThisCluster(f"{e}\n\nin program:\n{listing}") from None
    return program


def is_hierarchy_pipeline(op) -> bool:
    """Whether `op` is a pipelined hierarchy (transforms.PipelineHierarchy): an Overlapped of
    three legs, the node ReduceScatter, the AllReduce across nodes, the node gather."""
    return (isinstance(op, Overlapped) and len(op.body) == 3
            and isinstance(op.body[1].op, AllReduce) and op.body[1].op.sub is not None)


def pipeline_slice(stmt: Stmt):
    """(elements of a rank's node slice (sizes unbound), ranks per node) of a pipelined
    hierarchy's statement: what its chunks cut."""
    rs = stmt.op.body[0]
    return rs.out.type.shape[rs.op.dim] / rs.op.sub.per_node, rs.op.sub.per_node


def check_pipeline_chunks(stmt: Stmt, placement: Placement) -> None:
    """Raise IllegalTransform, naming the field and the fix, when a pipelined hierarchy's
    chunk count does not divide a rank's node slice at the placement's sizes."""
    if not is_hierarchy_pipeline(stmt.op):
        return
    extent, _ = pipeline_slice(stmt)
    bound = {sympy.Symbol(k, integer=True, positive=True): v for k, v in placement.sizes}
    value = sympy.sympify(extent).subs(bound)
    if not value.is_Integer:
        return  # sizes not bound: binding them checks the node slice itself
    chunks, n = stmt.op.chunks, int(value)
    if n % chunks:
        fits = [c for c in (2, 4, 8, 16, 32, 64) if n % c == 0] or [1]
        raise IllegalTransform(
            f"pipeline-hierarchy({stmt.op.body[1].name}): chunks must divide a rank's node "
            f"slice of {n} elements, got chunks={chunks}; pick chunks from {fits} or a size "
            f"that {chunks} divides")


def fused_span(stmt: Stmt, placement: Placement) -> int | None:
    """GPUs one instance of a fused collective kernel spans (None: no collective in it, or a
    size the placement does not bind): its group, or the ranks per node of a node-level
    (intra) collective."""
    spans = []
    for leaf in stmt.op.body:
        if isinstance(leaf.op, (ReduceScatter, AllGather, AllReduce, AllToAll)):
            sub = getattr(leaf.op, "sub", None)
            spans.append(sub.per_node if sub is not None and sub.axis == "intra"
                         else placement.group_size(leaf.out.type.group))
    known = [s for s in spans if s is not None]
    return max(known) if known else None


def check_runnable(stmt: Stmt, placement: Placement) -> None:
    """Raise NotOnThisCluster, saying why and what to use instead, when `stmt` is a fused
    collective kernel whose group spans several NVLink domains of `placement`, or holds a
    node-level collective whose nodes do not tile the group."""
    for leaf in stmt.leaves():
        sub = getattr(leaf.op, "sub", None)
        size = placement.group_size(leaf.out.type.group)
        if sub is not None and size is not None and size % sub.per_node:
            raise NotOnThisCluster(
                f"a node-level collective over {sub} must split its group into nodes of "
                f"{sub.per_node} GPUs, got a group of {size} GPUs on {placement.name} "
                f"({_where(leaf)}); split in nodes of {placement.gpus_per_node} "
                f"(hierarchical_split(..., per_node={placement.gpus_per_node})) or keep the "
                f"AllReduce whole")
    if isinstance(stmt.op, Overlapped):  # a fused consumer of an overlap runs the same way
        for inner in stmt.op.body:
            check_runnable(inner, placement)
        return
    if not isinstance(stmt.op, Fused) or stmt.op.engine == "ring":
        return  # NCCL's ring carries a ring-fused collective across nodes (RingFuse)
    span = fused_span(stmt, placement)
    if span is None or span <= placement.gpus_per_node or placement.nodes == 1:
        return
    domains = -(-span // placement.gpus_per_node)
    how = ("copy engines" if stmt.op.engine == "copy" else "peer loads and stores over NVLink")
    if stmt.op.kind == "alltoall" and placement.gpus_per_node == 1:
        raise NotOnThisCluster(
            f"a fused alltoall kernel ({how}) must have its group's GPUs share an NVLink "
            f"domain, got a group of {span} GPUs, each alone in its node of {placement.name} "
            f"({_where(stmt)}); use NCCL's AllToAll (a schedule without this fuse)")
    if stmt.op.kind == "alltoall":
        raise NotOnThisCluster(
            f"a fused alltoall kernel ({how}) must keep its group inside one NVLink domain of "
            f"{placement.gpus_per_node} GPUs, got a group of {span} GPUs over {domains} nodes "
            f"of {placement.name} ({_where(stmt)}); across nodes use NCCL's AllToAll (a "
            f"schedule without this fuse) or expert groups of at most "
            f"{placement.gpus_per_node} GPUs")
    if placement.gpus_per_node == 1:
        # one GPU of the group per node (a --mesh axis across nodes): there is no NVLink peer
        # to fuse with, and a hierarchical split would have nodes of one GPU
        raise NotOnThisCluster(
            f"a fused {stmt.op.kind} kernel ({how}) must have its group's GPUs share an "
            f"NVLink domain, got a group of {span} GPUs, each alone in its node of "
            f"{placement.name} ({_where(stmt)}); use NCCL collectives (a schedule without "
            "fuse, e.g. rs-c-ag), or run the fused kernel over a mesh axis inside a node "
            "(e.g. --axis tp)")
    raise NotOnThisCluster(
        f"a fused {stmt.op.kind} kernel ({how}) must keep its group inside one NVLink domain "
        f"of {placement.gpus_per_node} GPUs, got a group of {span} GPUs over {domains} nodes "
        f"of {placement.name} ({_where(stmt)}); across nodes use the hierarchical split "
        f"(s.hierarchical_split(allreduce, per_node={placement.gpus_per_node}): fused kernels "
        f"inside each node, an NCCL AllReduce across nodes), NCCL collectives (a schedule "
        f"without fuse, e.g. rs-c-ag), or groups of at most {placement.gpus_per_node} GPUs")
