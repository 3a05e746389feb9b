"""Tracing: `Program(...)` turns the graph of DSL nodes into a verified ir.Program, naming
values after the caller's variables; `Pipeline(...)` checks a pipeline's Sends."""

from __future__ import annotations

import itertools
import linecache
import sys
from collections.abc import Sequence
from pathlib import Path

from workbench import ir
from workbench.dsl.trace import (
    _PACKAGE_DIR,
    SIZE_FACTS,
    ArithNode,
    ConstNode,
    InputNode,
    Node,
    SizeNode,
    StmtNode,
    _at,
    _build_arith,
    _node,
    _user_location,
)
from workbench.errors import WorkbenchError
from workbench.types import Group, TensorType
from workbench.verify import verify


def _caller_names() -> dict[int, str]:
    """id(node) -> variable name, from the frame that called Program()."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    candidates: dict[int, list[str]] = {}
    if frame is not None:
        for var, val in frame.f_locals.items():
            if isinstance(val, Node) and not var.startswith("_"):
                candidates.setdefault(id(val), []).append(var)
    nodes = {id(v): v for v in frame.f_locals.values()} if frame is not None else {}
    return {key: _defining_name(nodes[key], vars_) for key, vars_ in candidates.items()}


def _defining_name(node: Node, names: list[str]) -> str:
    """Of the variables bound to one node (`g32 = Cast(f32, g1)` may return g1 itself), prefer
    the one assigned on the line that created the node."""
    if len(names) > 1 and getattr(node, "loc", ""):
        filename, _, line = node.loc.rpartition(":")
        for frame_file in _source_files():
            if Path(frame_file).name == filename:
                text = linecache.getline(frame_file, int(line))
                target = text.split("=", 1)[0].strip() if "=" in text else ""
                if target in names:
                    return target
    return names[0]


def _source_files() -> list[str]:
    files, frame = [], sys._getframe(1)
    while frame is not None:
        files.append(frame.f_code.co_filename)
        frame = frame.f_back
    return files


class _Tracer:
    def __init__(self, inputs: Sequence[InputNode], user_names: dict[int, str]):
        self.user_names = user_names
        self.names: dict[int, str] = {id(n): n.name for n in inputs}
        self.input_names = {n.name for n in inputs}
        self.inputs = {id(n) for n in inputs}
        self.env: dict[str, TensorType] = {n.name: n.type for n in inputs}
        self.stmts: list[ir.Stmt] = []
        self.fresh = itertools.count()
        self.seeds = itertools.count(1)
        self.seed_of: dict[int, int] = {}

    def _new_name(self, node: Node) -> str:
        explicit = getattr(node, "name", None)
        if explicit is not None and explicit in self.env:  # was renamed t0 without a word
            raise WorkbenchError(f"statement name must differ from the program's other values, "
                                 f"got name={explicit!r}, which is already "
                                 f"{'an input' if explicit in self.input_names else 'a value'} "
                                 f"(at {getattr(node, 'loc', '?')}); pick another name")
        name = explicit or self.user_names.get(id(node))
        while name is None or name in self.env:
            name = f"t{next(self.fresh)}"
        return name

    def expr(self, node: Node) -> ir.Expr:
        """The node as an inline expression (arithmetic inlined, statements referenced)."""
        if isinstance(node, ConstNode):
            return ir.Const(node.value)
        if isinstance(node, SizeNode):
            return ir.SizeValue(node.value)
        if isinstance(node, ArithNode):
            children = [self.expr(a) for a in node.args]
            if node.kind == "dropout" and node.params[1] is None:
                seed = self.seed_of.setdefault(id(node), next(self.seeds))
                return ir.Dropout(node.params[0], seed, children[0])
            return _build_arith(node, children)
        return ir.Ref(self.name(node))

    def name(self, node: Node) -> str:
        """The node as a named value, emitting its statement (and its arguments') if needed.

        Arguments are emitted before the node, in the order the user created them."""
        if id(node) in self.names:
            return self.names[id(node)]
        if isinstance(node, InputNode):
            raise WorkbenchError(f"tensor '{node.name}' must be listed in Program(inputs=...), "
                                 "got a use of it without a declaration there")
        if isinstance(node, (ConstNode, SizeNode)):
            raise WorkbenchError("a program value must be a tensor, got a literal number")
        for dep in self._unnamed_deps(node):  # deepest first: this recursion stays shallow
            self.name(dep)
        if isinstance(node, ArithNode):
            op = ir.Compute(self.expr(node))
        else:
            op = node.make([self.expr(a) if is_expr else self.name(a)
                            for a, is_expr in zip(node.args, node.expr_args)])
        name = self._new_name(node)
        try:
            t = op.infer(self.env, f"{name} = {op}")
        except WorkbenchError as e:
            raise _at(node.loc, e) from None
        self.stmts.append(ir.Stmt((ir.Value(name, t),), op, node.loc))
        self.env[name] = t
        self.names[id(node)] = name
        node.traced_name = name  # lets schedules refer to values by their DSL handles
        return name

    def _unnamed_deps(self, node: Node) -> list[Node]:
        """The statement nodes `node` needs that have no name yet, in the order the recursive
        emission would name them (arguments in creation order, each one's own arguments
        first), found without recursion: a chain of thousands of statements is a loop."""
        order: list[Node] = []
        seen: set[int] = set()
        deps = sorted(self._statement_deps(node), key=lambda n: n.seq, reverse=True)
        stack = [(d, False) for d in deps]
        while stack:
            n, expanded = stack.pop()
            if expanded:
                order.append(n)
                continue
            if id(n) in seen or id(n) in self.names or isinstance(
                    n, (InputNode, ConstNode, SizeNode)):
                continue
            seen.add(id(n))
            stack.append((n, True))
            stack += [(d, False) for d in sorted(self._statement_deps(n), key=lambda d: d.seq,
                                                 reverse=True)]
        return order

    def _statement_deps(self, node: Node) -> list[Node]:
        """The statement nodes (and arithmetic used as a statement argument) `node` reads."""
        deps: list[Node] = []
        if isinstance(node, ArithNode):
            args = [(a, True) for a in node.args]
        else:
            args = list(zip(node.args, node.expr_args))
        for a, is_expr in args:
            if isinstance(a, StmtNode):
                deps.append(a)
            elif isinstance(a, ArithNode):
                deps += self._statement_deps(a) if is_expr else [a]
        return deps


def Program(inputs: Sequence[InputNode], outputs: Sequence[Node], name: str | None = None,
            may_stay_sliced: Sequence[Node] = ()) -> ir.Program:
    """Trace a program from its inputs to its outputs and verify it.

    Statements appear in the order the outputs need them; values are named after the caller's
    variables. `name` defaults to the file the program is written in. `may_stay_sliced` names
    outputs that a schedule may leave Sliced (each rank keeps its slice: optimizer state,
    ZeRO-style); every other output keeps the storage the program as written gives it.
    """
    for i, node in enumerate(inputs):
        if not isinstance(node, InputNode):
            raise WorkbenchError(f"Program inputs must be Tensor or Variable declarations, "
                                 f"got {type(node).__name__} at position {i}")
    tracer = _Tracer(inputs, _caller_names())
    out_names = [tracer.name(_node(o)) for o in outputs]
    sliced_ok = []
    for o in may_stay_sliced:
        name_o = tracer.name(_node(o))
        if name_o not in out_names:
            raise WorkbenchError(f"may_stay_sliced must name outputs of the program, got "
                                 f"{name_o}; outputs: {', '.join(out_names)}")
        sliced_ok.append(out_names.index(name_o))
    if name is None:
        loc = _user_location()
        name = loc.split(".py")[0] if loc else "program"
    symbols = set().union(*(t.size_symbols() for t in tracer.env.values()))
    facts = tuple(sorted(_size_facts(inputs, symbols).items(), key=lambda f: f[0].name))
    program = ir.Program(
        name,
        tuple(ir.Value(n.name, n.type) for n in inputs),
        tuple(tracer.stmts),
        tuple(ir.Value(n, tracer.env[n]) for n in out_names),
        facts,
        tuple((n.name, *n.range) for n in inputs if n.range is not None),
        tuple(sorted(sliced_ok)),
    )
    return verify(program)


def _size_facts(inputs: Sequence[InputNode], symbols: set) -> dict:
    """The program's Size facts: those its inputs were declared under (one multiple per size),
    then the registry's for sizes of `symbols` no input carries (used in no input's dims)."""
    facts: dict = {}
    first: dict = {}  # size -> the input that brought its fact
    for node in inputs:
        for sym, multiple in node.facts:
            if facts.setdefault(sym, multiple) != multiple:
                raise WorkbenchError(
                    f"Size {sym.name} was declared with multiple_of={facts[sym]} for "
                    f"{first[sym]} and multiple_of={multiple} for {node.name}; declare each "
                    "size once, before the tensors that use it")
            first.setdefault(sym, node.name)
    in_inputs = set().union(*(node.type.size_symbols() for node in inputs))
    for sym in symbols - in_inputs:
        if sym in SIZE_FACTS:
            facts[sym] = SIZE_FACTS[sym]
    return facts


def Pipeline(stages: Sequence[Group], inputs: Sequence[InputNode], outputs: Sequence[Node],
             name: str | None = None) -> ir.Program:
    """A pipeline-parallel program: like Program, over `stages` (each a Stage, in order),
    and every Send goes from a stage to the next. Ranks are numbered stage-major (stage s's
    rank r is global rank s P + r); a schedule may fuse computation into a Send
    (`s.fuse(..., send)`) and overlap it (studies/pipeline.py)."""
    program = Program(inputs, outputs, name)
    order = {g: i for i, g in enumerate(stages)}
    for stmt in program.leaves():
        if isinstance(stmt.op, ir.Send):
            src = program.value(stmt.op.x).type.group
            if order.get(src, -2) + 1 != order.get(stmt.op.dst, -1):
                raise WorkbenchError(
                    f"{stmt.name} = {stmt.op} (at {stmt.loc}): a pipeline Send must go from a "
                    f"stage to the next one in {[g.name for g in stages]}, got {src.name} -> "
                    f"{stmt.op.dst.name}")
    return program
