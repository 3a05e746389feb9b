"""The planner's state while lowering one program: its stages in pipeline order (stage_order),
value types, uses, where each value lives, the buffers allocated so far, and the helpers every
lowering kind shares (C types, the result location of a statement, chunk rows).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace

import numpy as np
import sympy

from codegen.plan import RANK, BufferSpec, Loc, fault
from workbench import ir
from workbench.types import LocalLayout, OnRoot, ReplicatedLayout, Sliced, TensorType

C_TYPES = {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16", "i32": "int"}


# Element types of buffers no program value has: f64 partial sums of squares, u32 flags.
BUF_C_TYPES = {**C_TYPES, "f64": "double", "u32": "uint32_t"}


REDUCE_NAMES = {ir.ReduceOp.Sum: "add", ir.ReduceOp.Max: "max", ir.ReduceOp.Min: "min",
                ir.ReduceOp.Prod: "mul"}


_PLAIN_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MANGLED = re.compile(r".*_x[0-9a-f]{12}")


def c_ident(name: str) -> str:
    """`name` as a C identifier, one to one: a plain ASCII identifier is itself (the DSL
    accepts identifiers only, so kernels read as the program's names); any other text (and
    a plain name that looks mangled) is its ASCII letters and digits plus `_x` and a hash of
    the whole name, so `a-b` and `a_b` never meet and nothing the user wrote reaches the
    CUDA source verbatim. Planner.check_idents refuses the (hash) collision that remains."""
    if _PLAIN_IDENT.fullmatch(name) and not _MANGLED.fullmatch(name):
        return name
    safe = re.sub(r"[^A-Za-z0-9_]", "_", name)[:64]
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{'v' if not safe or safe[0].isdigit() else ''}{safe}_x{digest}"


def numel_of(shape) -> sympy.Expr:
    """Elements of a tensor of `shape` (1 for a scalar)."""
    return sympy.Mul(*shape) if shape else sympy.Integer(1)


def c_type_of(t: TensorType) -> str:
    """The C type of `t`'s elements."""
    if t.dtype.name not in C_TYPES:
        raise fault(f"codegen element type must be one of {sorted(C_TYPES)}, got {t.dtype}")
    return C_TYPES[t.dtype.name]


def is_costly(e: ir.Expr) -> bool:
    """Whether computing `e` takes more than a register or a literal: worth hoisting."""
    return any(isinstance(x, (ir.Unary, ir.Binary)) for x in ir.expr_nodes(e))


def float_literal(x: float) -> str:
    """The C literal of `x` as an f32."""
    # The decimal repr of the f32 value: the compiler's rounding then gives exactly that f32,
    # which is what the interpreter's np.float32(v) holds.
    return repr(float(np.float32(x))) + "f"


def stage_order(program: ir.Program) -> tuple:
    """The program's groups in pipeline order: every Send goes from a stage to the next one.
    A program of one group gives that group."""
    groups = list(program.groups())
    types = {v.name: v.type for v in program.all_values()}
    nxt = {}
    for leaf in program.leaves():
        for v in leaf.outs:
            types[v.name] = v.type
        if isinstance(leaf.op, ir.Send):
            nxt[types[leaf.op.x].group] = leaf.op.dst
    firsts = [g for g in groups if g not in nxt.values()]
    if len(groups) > 1 and len(firsts) != 1:
        raise fault(f"a pipeline's stages must form one chain of Sends, got groups "
                    f"{', '.join(g.name for g in groups)} with Sends "
                    f"{', '.join(f'{a.name}->{b.name}' for a, b in nxt.items()) or 'none'}; "
                    "Send each stage's result to the next one")
    order = [firsts[0]] if firsts else groups[:1]
    while order[-1] in nxt and nxt[order[-1]] not in order:
        order.append(nxt[order[-1]])
    if len(order) != len(groups):
        raise fault(f"a pipeline's stages must form one chain of Sends, got the chain "
                    f"{' -> '.join(g.name for g in order)} missing "
                    f"{', '.join(g.name for g in groups if g not in order)}")
    return tuple(order)


class Planner:
    """Lowering's state for one program on groups of P ranks: value types, the stage of
    the statement being lowered, buffers, value locations and uses."""

    def __init__(self, program: ir.Program, P: int):
        self.program = program
        self.P = P
        self.psub = {g.size: P for g in program.groups()}
        self.stages = stage_order(program)
        self.stage_of = {g: i for i, g in enumerate(self.stages)}
        self.group = 0  # stage of the statement being lowered (its extra buffers live there)
        self.types: dict[str, TensorType] = {v.name: v.type for v in program.all_values()}
        for s in program.leaves():
            for v in s.outs:
                self.types[v.name] = v.type
        self.buffers: dict[str, BufferSpec] = {}
        self.locs: dict[str, Loc] = {}
        self.kernel_of: dict[str, int] = {}
        self.uses: dict[str, set[int]] = {}
        # Values a fused region computes in one launch and reads in a later one (a norm sits
        # between them): they need memory although one statement computes and uses them.
        self.spill: set[str] = set()
        self._use_order: dict[str, list[int]] = {}
        self.check_idents()

    def check_idents(self) -> None:
        """Two value names must never become one C identifier (a kernel would silently read
        one for the other): refused with both names."""
        seen: dict[str, str] = {}
        for name in self.types:
            other = seen.setdefault(c_ident(name), name)
            if other != name:
                raise fault(f"value names must map to distinct C identifiers, got {other!r} "
                            f"and {name!r} both as {c_ident(name)}; rename one")

    def sub(self, expr) -> sympy.Expr:
        """`expr` with each group size replaced by P."""
        return sympy.sympify(expr).subs(self.psub)

    def local_numel(self, name: str) -> sympy.Expr:
        """Elements per rank of value `name`."""
        return self.sub(numel_of(self.types[name].local_shape()))

    def new_buffer(self, name: str, numel, holds_input: str = "") -> Loc:
        """A fresh buffer for value `name`, in its stage, and the value's location in it."""
        bname = c_ident(name)
        while bname in self.buffers:
            bname += "_"
        t = self.types[name]
        self.buffers[bname] = BufferSpec(bname, t.dtype.name, self.sub(numel),
                                         holds_input=holds_input, group=self.stage_of[t.group])
        return Loc(bname, sympy.Integer(0), self.sub(numel))

    def add_buffer(self, name: str, dtype: str, numel, peer: bool = False,
                   group: int | None = None) -> None:
        """A buffer no program value has (flags, partial sums, staging), in the stage of the
        statement being lowered unless `group` says another."""
        self.buffers[name] = BufferSpec(name, dtype, self.sub(numel), peer=peer,
                                        group=self.group if group is None else group)

    def mark_peer(self, buffer: str) -> None:
        """`buffer` is mapped into other ranks (CUDA IPC)."""
        self.buffers[buffer] = replace(self.buffers[buffer], peer=True)

    def stage(self, stmt: ir.Stmt) -> int:
        """The stage a statement runs in: that of the values its first leaf reads (a Send
        reads in its source stage), or of its first value when it reads none."""
        leaf = next(stmt.leaves())
        names = [n for n in leaf.op.operands() if n in self.types] or [leaf.outs[0].name]
        return self.stage_of[self.types[names[0]].group]

    def analyse_uses(self) -> None:
        """Record which statement computes each value and which statements read it."""
        for k, stmt in enumerate(self.program.stmts):
            for leaf in stmt.leaves():
                for v in leaf.outs:
                    self.kernel_of[v.name] = k
        order = 0
        for k, stmt in enumerate(self.program.stmts):
            for leaf in stmt.leaves():
                for name in leaf.op.operands():
                    self.uses.setdefault(name, set()).add(k)
                    self._use_order.setdefault(name, []).append(order)
                order += 1

    def needs_memory(self, name: str) -> bool:
        """Whether value `name` must live in memory: an output, spilled between launches,
        or read by another statement than the one computing it."""
        if name in self.spill or any(v.name == name for v in self.program.outputs):
            return True
        k = self.kernel_of.get(name)
        return any(u != k for u in self.uses.get(name, ()))

    def last_use(self, name: str, leaf_index: int) -> bool:
        """No statement after leaf `leaf_index` reads `name`, and it is no program output."""
        later = [o for o in self._use_order.get(name, []) if o > leaf_index]
        return not later and not any(v.name == name for v in self.program.outputs)

    def in_place(self, target: str, leaf_index: int) -> bool:
        """Whether an Update at leaf `leaf_index` may write into its target's buffer: it is the
        last use of `target` (no later statement reads the old value, and it is no output)."""
        later = [o for o in self._use_order.get(target, []) if o > leaf_index]
        return not later and not any(v.name == target for v in self.program.outputs)


def result_loc(pl: Planner, leaf: ir.Stmt, index: int, what: str) -> Loc | None:
    """Location of a leaf's value (None: registers only)."""
    out = leaf.out
    op = leaf.op
    if isinstance(op, ir.Update) and not pl.in_place(op.target, index):
        # A later statement reads the old value (`delta = w1 - w`): the update is written to a
        # fresh buffer and the target keeps its value, as the interpreter's meaning is.
        return pl.new_buffer(out.name, pl.local_numel(out.name))
    if isinstance(op, ir.Update):
        tl = pl.locs.get(op.target)
        if tl is None:
            raise fault(f"{what}: the target of an Update must live in memory, got "
                        f"'{op.target}' in registers")
        tt, rt = pl.types[op.target], out.type
        if tt.layout == rt.layout or isinstance(rt.layout, OnRoot):
            # OnRoot: the root's update of the whole tensor (every rank runs the kernel; only
            # the root's result means anything, as a Reduce's)
            return tl
        if (isinstance(rt.layout, Sliced) and rt.layout.dim == 0
                and isinstance(tt.layout, (ReplicatedLayout, LocalLayout))):
            s = pl.local_numel(out.name)
            return Loc(tl.buffer, tl.offset + RANK * s, s, whole_offset=tl.offset)
        raise fault(f"{what}: an Update from {tt.layout} to {rt.layout} must slice dim 0, "
                    f"got {rt.layout}")
    if isinstance(op, ir.AllGather):
        src = pl.locs.get(op.x)
        if src is not None and src.whole_offset is not None:
            return Loc(src.buffer, src.whole_offset, pl.local_numel(out.name))
        return pl.new_buffer(out.name, pl.local_numel(out.name))
    if pl.needs_memory(out.name):
        return pl.new_buffer(out.name, pl.local_numel(out.name))
    return None


def chunk_rows(pl: Planner, t: TensorType, chunks: int) -> tuple[sympy.Expr, int]:
    """Rows of a chunked kernel's whole tensor and the parts they must divide into."""
    return pl.sub(t.shape[0]), chunks * (pl.P if sliced_dim0(t) else 1)


def sliced_dim0(t: TensorType) -> bool:
    """Whether a value is sliced along dim 0 (the layout chunked kernels split further)."""
    return isinstance(t.layout, Sliced) and t.layout.dim == 0

