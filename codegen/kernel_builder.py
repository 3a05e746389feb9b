"""KernelBuilder: turns statements (leaves of a region) into one KernelSpec: its parameters, how
each operand is loaded, the statements as C expressions over f32 registers, where results are
stored (locally or into every peer's buffer), norms' partial sums, and loop-invariant hoisting.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import sympy

from codegen.cprinter import c_index, size_c_name
from codegen.plan import CHUNK, ELEM, MAX_BLOCKS, RANK, Loc, fault
from codegen.planner import (
    BUF_C_TYPES,
    C_TYPES,
    Planner,
    c_ident,
    c_type_of,
    float_literal,
    is_costly,
    numel_of,
    result_loc,
)
from codegen.spec import Assign, KernelSpec, Load, NormAcc, Param, Push, Store, mangle
from workbench import ir
from workbench.types import Sliced, TensorType

# What a fused kernel accumulates for ReduceTensor(op, x), by op (f64 partials per block).
REDUCE_TENSOR_ACC = {ir.ReduceOp.Sum: "sum", ir.ReduceOp.Max: "max", ir.ReduceOp.Min: "min",
                     ir.ReduceOp.Prod: "prod"}

# The CUDA C of each elementwise function (f32, no fast math), from its operand's C; one entry
# per name in ir.UNARY_OPS.
C_UNARY: dict[str, Callable[[str], str]] = {
    "neg": lambda x: f"(-{x})", "sqrt": lambda x: f"sqrtf({x})",
    "rsqrt": lambda x: f"(1.0f / sqrtf({x}))", "exp": lambda x: f"expf({x})",
    "log": lambda x: f"logf({x})", "abs": lambda x: f"fabsf({x})",
    "tanh": lambda x: f"tanhf({x})", "erf": lambda x: f"erff({x})",
    "sigmoid": lambda x: f"(1.0f / (1.0f + expf(-{x})))",
}


class KernelBuilder:
    """Collects the params, loads, statements and stores of one kernel over a domain."""

    def __init__(self, pl: Planner, domain: TensorType, what: str, chunks: int = 1,
                 chunked_slices: bool = False):
        self.pl = pl
        self.domain = domain
        self.what = what
        self.chunks = chunks
        # A pipelined hierarchy's leg (codegen.lower_pipeline): a slice held per rank is held
        # chunk by chunk, launch c's part of it at c * extent (as NCCL's chunked calls of the
        # legs before it wrote it), so the kernel reads and writes such slices at that offset.
        self.chunked_slices = chunked_slices and chunks > 1
        self.domain_numel = pl.sub(numel_of(domain.local_shape()))
        # Elements per rank of one launch. Chunked (an overlapped consumer): launch `chunk`
        # covers rows [chunk * rows/chunks, (chunk+1) * rows/chunks) of the whole tensor and
        # rank r its r-th part of those rows, so `slice_index` counts parts of that size.
        # A chunked kernel over a whole (Replicated or Local) tensor, the fused Send of an
        # overlap, covers the chunk's rows on every rank: its parts are counted by chunk alone.
        self.extent = self.domain_numel / chunks
        self.sliced = isinstance(domain.layout, Sliced) and domain.layout.dim == 0
        self.slice_index = (RANK if chunks == 1 else
                            CHUNK * pl.P + RANK if self.sliced else CHUNK)
        if chunks > 1 and isinstance(domain.layout, Sliced) and not self.sliced:
            raise fault(f"{what}: an overlapped kernel must compute on dim-0 slices or whole "
                        f"tensors, got {domain.layout}")
        self.params: dict[str, Param] = {}
        self.loads: dict[str, Load] = {}
        self.scalars: dict[str, Load] = {}
        self.assigns: list[Assign] = []
        self.stores: list[Store] = []
        self.regs: dict[str, str] = {}
        self.symbols: set[sympy.Symbol] = set()
        self.dropout = False
        self.pushes: list[Push] = []
        self.norms: list[NormAcc] = []
        self.pending: list[tuple[str, str, bool]] = []  # (norm, partials buffer, cross-rank)
        # How tensors are read where the usual rule does not hold (None: the usual rule): the
        # computation before a fused ReduceScatter reads them whole (codegen.lower_prologue),
        # before a fused AllToAll from their source rank (codegen.lower_alltoall).
        # (name, type, location, C type) -> Load.
        self.read_hook = None

    # -- parameters

    @property
    def slice_base(self) -> sympy.Expr:
        """Whole-tensor element index of this rank's first element in this launch."""
        return self.slice_index * self.extent

    def _c(self, expr) -> str:
        expr = self.pl.sub(expr)
        self.symbols |= {s for s in expr.free_symbols if s not in (RANK, ELEM, CHUNK)}
        return c_index(expr)

    def _unchunked(self, thing: str) -> None:
        """Raise for what an overlapped (chunked) kernel cannot do: `thing` says what."""
        if self.chunks > 1:
            raise fault(f"{self.what}: an overlapped fused collective must read whole tensors "
                        f"and keep what it computes in registers, got {thing}; measure this "
                        "schedule without the overlap")

    def buf_param(self, buffer: str, const: bool) -> str:
        """The kernel parameter pointing at this rank's `buffer` (a write makes it non-const)."""
        name = f"p_{buffer}"
        b = self.pl.buffers[buffer]
        decl = f"{'const ' if const else ''}{BUF_C_TYPES[b.dtype]}* __restrict__ {name}"
        old = self.params.get(name)
        if old is None or (old.c_decl.startswith("const") and not const):
            self.params[name] = Param(name, decl, "buf", buffer)
        return name

    def remote_param(self, buffer: str, group: int, c_type: str = "") -> str:
        """The pointer to `buffer` on this local rank of stage `group` (a fused Send's
        destination, mapped through CUDA IPC)."""
        self.pl.mark_peer(buffer)
        ctype = c_type or BUF_C_TYPES[self.pl.buffers[buffer].dtype]
        name = f"p_{buffer}_remote"
        self.params[name] = Param(name, f"{ctype}* {name}", "remote", buffer, group)
        return name

    def peer_params(self, buffer: str, const: bool) -> tuple[str, ...]:
        """One parameter per rank of the stage pointing at its `buffer` (CUDA IPC)."""
        self.pl.mark_peer(buffer)
        ctype = C_TYPES[self.pl.buffers[buffer].dtype]
        names = []
        for k in range(self.pl.P):
            name = f"p_{buffer}_peer{k}"
            # No __restrict__: a rank's own entry aliases its local pointer.
            self.params[name] = Param(name, f"{'const ' if const else ''}{ctype}* {name}",
                                      "peer", buffer, k)
            names.append(name)
        return tuple(names)

    # -- reading operands

    def operand(self, name: str) -> tuple[str, bool]:
        """C text of a value inside an expression, and whether it is per-element."""
        if name in self.regs:
            return self.regs[name], True
        t = self.pl.types[name]
        loc = self.pl.locs.get(name)
        if loc is None:
            raise fault(f"{self.what}: value '{name}' must be in memory or computed in this "
                        "kernel, got neither")
        ctype = c_type_of(t)
        if self.read_hook is not None and t.rank:
            var = f"q_{c_ident(name)}"
            if var not in self.loads:
                self.loads[var] = self.read_hook(var, name, t, loc, ctype)
            return var, True
        if t.rank == 0:
            var = f"s_{c_ident(name)}"
            if var not in self.scalars:
                ptr = self.buf_param(loc.buffer, const=True)
                self.scalars[var] = Load(var, ctype, "scalar", ptr, self._c(loc.offset))
            return var, False
        var = f"a_{c_ident(name)}"
        if var not in self.loads:
            ptr = self.buf_param(loc.buffer, const=True)
            self.loads[var] = self._read(var, name, t, loc, ctype, ptr)
        return var, True

    def _read(self, var, name, t, loc, ctype, ptr) -> Load:
        d = self.domain
        same_local = (len(t.shape) == len(d.shape) and all(
            ir.proven_equal(self.pl.sub(a), self.pl.sub(b))
            for a, b in zip(t.local_shape(), d.local_shape())))
        if same_local and self.chunks > 1 and not isinstance(d.layout, Sliced):
            # A whole-tensor domain in chunks: this launch's rows of an operand of its shape.
            return Load(var, ctype, "contig", ptr, self._c(loc.offset + self.slice_base))
        if same_local and (t.layout == d.layout or not isinstance(d.layout, Sliced)):
            if self.chunked_slices:
                return Load(var, ctype, "contig", ptr,
                            self._c(loc.offset + CHUNK * self.extent))
            self._unchunked(f"'{name}', a slice held per rank")
            return Load(var, ctype, "contig", ptr, self._c(loc.offset))
        whole = len(t.shape) == len(d.shape) and all(
            ir.proven_equal(self.pl.sub(a), self.pl.sub(b)) for a, b in zip(t.shape, d.shape))
        if (whole and isinstance(d.layout, Sliced) and d.layout.dim == 0
                and not isinstance(t.layout, Sliced)):
            # A whole tensor read by a computation on slices: rank r's slice of it.
            return Load(var, ctype, "contig", ptr, self._c(loc.offset + self.slice_base))
        return Load(var, ctype, "gather", ptr, self._c(loc.offset),
                    index=self._c(self._gather_index(t)))

    def _gather_index(self, t: TensorType) -> sympy.Expr:
        """Element index of a broadcast operand for domain element `e` (numpy broadcasting)."""
        d = self.domain
        dl = [self.pl.sub(x) for x in d.local_shape()]
        dl[0] = dl[0] / self.chunks  # rows of one launch
        tl = [self.pl.sub(x) for x in t.local_shape()]
        coords = []
        stride = sympy.Integer(1)
        for k in reversed(range(len(dl))):
            coords.append(sympy.Mod(sympy.floor(ELEM / stride), dl[k]))
            stride = stride * dl[k]
        coords.reverse()
        index = sympy.Integer(0)
        ostride = sympy.Integer(1)
        for k in reversed(range(len(tl))):
            dk = k + len(dl) - len(tl)
            if tl[k] != 1:
                c = coords[dk]
                if (isinstance(d.layout, Sliced) and d.layout.dim == dk
                        and not isinstance(t.layout, Sliced)):
                    c = c + self.slice_index * dl[dk]
                elif self.chunks > 1 and dk == 0 and not isinstance(d.layout, Sliced):
                    c = c + self.slice_index * dl[dk]  # the chunk's rows of a whole tensor
                index = index + c * ostride
            ostride = ostride * tl[k]
        return index

    # -- expressions

    def expr(self, e: ir.Expr, env_types, hoist: bool = True) -> str:
        """C text of an elementwise expression; the largest costly parts that read only
        scalars (Adam's 1 - beta1 ** step) are hoisted out of the loop (`_hoist`)."""
        if hoist and self._uniform(e) and is_costly(e):
            return self._hoist(self._expr(e, env_types, hoist=False))
        return self._expr(e, env_types, hoist)

    def _uniform(self, e: ir.Expr) -> bool:
        """Whether `e` reads only scalars held in memory (no per-element value, no dropout,
        no cast), so it has one value per kernel launch."""
        if any(isinstance(x, (ir.Dropout, ir.Cast)) for x in ir.expr_nodes(e)):
            return False
        return all(name not in self.regs and self.pl.types[name].rank == 0
                   for name in ir.expr_refs(e))

    def _hoist(self, text: str) -> str:
        """A register computed once per thread before the loop, holding C expression `text`
        (of scalars only); the same text gets the same register."""
        for load in self.scalars.values():
            if load.mode == "hoisted" and load.expr == text:
                return load.var
        var = f"h_{sum(1 for x in self.scalars.values() if x.mode == 'hoisted')}"
        self.scalars[var] = Load(var, "float", "hoisted", "", expr=text)
        return var

    def _expr(self, e: ir.Expr, env_types, hoist: bool = True) -> str:
        match e:
            case ir.Ref(name):
                var, vec = self.operand(name)
                return f"{var}[j]" if vec else var
            case ir.Const(v):
                return float_literal(v)
            case ir.SizeValue(v):
                # Sizes are kernel parameters: evaluate in double once per thread, round to
                # f32 once (the interpreter does the same), outside the element loop.
                value = self.pl.sub(v)
                self.symbols |= {s for s in value.free_symbols if s not in (RANK, ELEM, CHUNK)}
                # Each size as a double, so sqrt/pow pick the device's double overloads.
                as_double = {sym: sympy.Symbol(f"static_cast<double>({c_index(sym)})")
                             for sym in value.free_symbols}
                text = sympy.ccode(value.subs(as_double))
                return self._hoist(f"static_cast<float>({text})")
            case ir.Where(c, a, b):
                cond = self.expr(c, env_types, hoist)
                x, y = self.expr(a, env_types, hoist), self.expr(b, env_types, hoist)
                return f"(({cond}) != 0.0f ? {x} : {y})"
            case ir.Binary(op, a, b):
                x, y = self.expr(a, env_types, hoist), self.expr(b, env_types, hoist)
                if op in ("add", "sub", "mul", "div"):
                    return f"({x} {ir.BINARY_OPS[op]} {y})"
                if op in ir.COMPARISONS:  # a mask: 1 where true, as the interpreter's
                    return f"(({x} {ir.BINARY_OPS[op]} {y}) ? 1.0f : 0.0f)"
                return {"pow": f"wb::pow_ref({x}, {y})", "max": f"fmaxf({x}, {y})",
                        "min": f"fminf({x}, {y})"}[op]
            case ir.Unary(fn, a):
                x = self.expr(a, env_types, hoist)
                return C_UNARY[fn](x)
            case ir.Cast(dtype, a):
                return f"wb::round_to<{C_TYPES[dtype.name]}>({self.expr(a, env_types, hoist)})"
            case ir.Dropout(p, seed, a):
                self.dropout = True
                t = ir.expr_type(a, env_types, self.what)
                gidx = ELEM
                if isinstance(t.layout, Sliced):
                    if t.layout.dim != 0:
                        raise fault(f"{self.what}: Dropout on slices must slice dim 0, got "
                                    f"{t.layout}")
                    gidx = ELEM + self.slice_base
                elif self.chunks > 1 and not isinstance(self.domain.layout, Sliced):
                    gidx = ELEM + self.slice_base  # the chunk's rows of a whole tensor
                else:
                    self._unchunked("a Dropout of a whole tensor")
                scale = float_literal(float(np.float32(1.0 / (1.0 - p))))
                x = self.expr(a, env_types, hoist)
                return (f"wb::dropout({x}, {int(seed) & 0xFFFFFFFF}u, "
                        f"static_cast<unsigned long long>({self._c(gidx)}), "
                        f"{float_literal(p)}, {scale})")
        raise fault(f"{self.what}: expression must be elementwise, got {e!r}")

    def compute(self, leaf: ir.Stmt, index: int) -> None:
        """A Compute or Update leaf into a register, stored where the program needs it in
        memory (`index`: the leaf's index in the program, for in-place checks)."""
        out = leaf.out
        what = f"statement {out.name} ({leaf.op})"
        if not ir.proven_equal(self.pl.sub(numel_of(out.type.local_shape())), self.domain_numel):
            raise fault(f"{what}: a fused computation must have the kernel's domain of "
                        f"{self.domain_numel} elements per rank, got {out.type}")
        text = self.expr(leaf.op.expr, self.pl.types)
        var = f"r_{c_ident(out.name)}"
        self.assigns.append(Assign(var, c_type_of(out.type), text))
        self.regs[out.name] = var
        loc = result_loc(self.pl, leaf, index, what)
        if loc is not None:
            if self.chunked_slices:  # a pipelined leg (xnode): the chunk's part of a slice
                offset = self._chunked_offset(loc)
            elif self.chunks > 1 and not isinstance(self.domain.layout, Sliced):
                offset = loc.offset + self.slice_base  # this launch's rows of a whole tensor
            else:
                self._unchunked(f"'{out.name}' stored in memory")
                offset = loc.offset
            self.pl.locs[out.name] = loc
            ptr = self.buf_param(loc.buffer, const=False)
            self.stores.append(Store(var, c_type_of(out.type), ptr, self._c(offset)))

    def _chunked_offset(self, loc: Loc):
        """Where launch `chunk` of a pipelined leg stores a value at `loc`: this rank's part of
        the chunk's rows of a whole tensor (an Update in place of one), or the chunk's part of
        a slice held per rank."""
        if loc.whole_offset is not None:
            return loc.whole_offset + self.slice_base
        return loc.offset + CHUNK * self.extent

    def gathered(self, leaf: ir.Stmt, index: int) -> tuple[Loc, bool]:
        """A fused AllGather of a value computed in the kernel: where the gathered tensor
        lives, and whether this rank's slice is already there (an Update wrote it in place)."""
        lop = leaf.op
        if lop.x not in self.regs:
            raise fault(f"{self.what}: a fused AllGather must gather a value computed in the "
                        f"kernel, got '{lop.x}'")
        src_loc = self.pl.locs.get(lop.x)
        dst = result_loc(self.pl, leaf, index, self.what)
        self.pl.locs[leaf.out.name] = dst
        self.regs[leaf.out.name] = self.regs[lop.x]
        return dst, src_loc is not None and src_loc.whole_offset is not None

    def reduced(self, leaf: ir.Stmt, index: int, load: Load) -> None:
        """A ReduceScatter's slice loaded (and combined) by `load`, held in registers, and
        stored where the program needs it in memory."""
        self.loads[load.var] = load
        rvar = f"r_{c_ident(leaf.out.name)}"
        self.assigns.append(Assign(rvar, c_type_of(leaf.out.type), f"{load.var}[j]"))
        self.regs[leaf.out.name] = rvar
        loc = result_loc(self.pl, leaf, index, self.what)
        if loc is not None:
            self._unchunked(f"'{leaf.out.name}' stored in memory")
            self.pl.locs[leaf.out.name] = loc
            ptr = self.buf_param(loc.buffer, const=False)
            self.stores.append(Store(rvar, c_type_of(leaf.out.type), ptr, self._c(loc.offset)))

    def spec(self, kind: str, template: str, P: int, extra: list[Param], comment: str,
             vec_types: list[str], unroll: int = 1, window: bool = False) -> KernelSpec:
        """The kernel built so far as a named KernelSpec of `kind`, rendered by `template`;
        `extra` parameters go last, `vec_types` (C types) set the vector width."""
        extent = self._c(self.extent)
        params = list(self.params.values())
        params += [Param(size_c_name(s.name), f"long long {size_c_name(s.name)}", "size", s.name)
                   for s in sorted(self.symbols, key=lambda s: s.name)]
        params.append(Param("rank", "int rank", "rank"))
        if self.chunks > 1:
            params.append(Param("chunk", "long long chunk", "chunk"))
        if window:
            params += [Param("win_first", "long long win_first", "win_first"),
                       Param("win_count", "long long win_count", "win_count")]
        params += extra
        sizes = [{"float": 4, "__half": 2, "__nv_bfloat16": 2, "int": 4}[c] for c in vec_types]
        vec = 16 // min(sizes) if sizes else 4
        spec = KernelSpec(kind, template, P, vec, extent, tuple(params),
                          tuple(self.loads.values()), tuple(self.assigns), tuple(self.stores),
                          tuple(self.scalars.values()), self.dropout, unroll=unroll,
                          pushes=tuple(self.pushes), elem_bytes=tuple(sorted(set(sizes))),
                          norms=tuple(self.norms), window=window, comment=comment)
        return mangle(spec)

    def norm(self, leaf: ir.Stmt) -> None:
        """First phase of Norm(x) or ReduceTensor(op, x) in this kernel: per-block f64 partials
        (sums of squares; sums, products, maxima or minima) of x into a partials buffer; the
        value exists only after a finishing step (finish_step), across ranks when x is Sliced."""
        out, x = leaf.out, leaf.op.x
        what = f"statement {out.name} ({leaf.op})"
        acc = "norm" if isinstance(leaf.op, ir.Norm) else REDUCE_TENSOR_ACC[leaf.op.op]
        self._unchunked(f"the reduction {out.name}")
        if not ir.proven_equal(self.pl.local_numel(x), self.extent):
            raise fault(f"{what}: a norm in a kernel must cover the kernel's domain of "
                        f"{self.extent} elements per rank, got {self.pl.types[x]}")
        var, vec = self.operand(x)
        if not vec:
            raise fault(f"{what}: Norm must reduce a tensor, got the scalar '{x}'")
        cross = isinstance(self.pl.types[x].layout, Sliced)
        partials = f"partials_{c_ident(out.name)}"
        self.pl.add_buffer(partials, "f64", sympy.Integer(MAX_BLOCKS), peer=cross)
        ptr = self.buf_param(partials, const=False)
        self.norms.append(NormAcc(var, (ptr,), MAX_BLOCKS, op=acc))
        self.pl.locs[out.name] = self.pl.new_buffer(out.name, 1)
        self.pending.append((out.name, partials, cross, acc))

    def vec_types(self) -> list[str]:
        """C types of the per-element loads and stores (they set the vector width)."""
        pushed = [c for p in self.pushes if hasattr(p, "assigns")
                  for c in (p.c_type, *(ld.c_type for ld in p.loads),
                            *(st.c_type for st in p.stores))]
        return ([ld.c_type for ld in self.loads.values()
                 if ld.mode in ("contig", "reduce", "exchange")]
                + [s.c_type for s in self.stores] + pushed)

