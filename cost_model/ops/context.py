"""What every cost rule reads: the program, cluster and sizes (CostContext), and what it
returns (OpCost), with the helpers that combine the busy times of several statements."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import sympy

from cost_model.collectives import smax
from cost_model.hardware import Cluster
from workbench import ir
from workbench.options import CodegenOptions
from workbench.types import Group, TensorType


@dataclass(frozen=True)
class CostContext:
    """A program, a cluster, the bound sizes, whether to build symbolic expressions, and the
    codegen options the program is generated with (the knobs the model prices:
    workbench.options.PRICED)."""

    program: ir.Program
    cluster: Cluster
    bound: Mapping[sympy.Symbol, int]
    symbolic: bool = False
    types: dict = field(default_factory=dict)
    options: CodegenOptions = CodegenOptions()
    # group -> its bound size: asked per rank and route by the simulator, so sympy's subs
    # runs once per group, not once per call
    group_sizes: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        if not self.types:
            self.types.update({v.name: v.type for v in self.program.all_values()})

    def size(self, expr):
        """A size expression: kept symbolic, or evaluated to a number with the bound sizes."""
        expr = sympy.sympify(expr)
        return expr if self.symbolic else float(expr.subs(self.bound))

    def group_size(self, group: Group) -> int:
        """The bound (numeric) size of a group: decides the links it spans."""
        size = self.group_sizes.get(group)
        if size is None:
            size = self.group_sizes[group] = int(sympy.sympify(group.size).subs(self.bound))
        return size

    def P(self, group: Group):
        """A group's size (the ranks a collective spans), symbolic or a number."""
        return self.size(group.size)

    def local_nbytes(self, name: str):
        """Bytes of value `name` that one rank holds."""
        t: TensorType = self.types[name]
        n = sympy.Mul(*t.local_shape()) if t.shape else sympy.Integer(1)
        return self.size(n * t.dtype.nbytes)

    def full_nbytes(self, name: str):
        """Bytes of the whole logical value `name`."""
        return self.size(self.types[name].nbytes())

    def local_numel(self, name: str):
        """Elements of value `name` that one rank holds."""
        t: TensorType = self.types[name]
        return self.size(sympy.Mul(*t.local_shape()) if t.shape else sympy.Integer(1))


@dataclass(frozen=True)
class OpCost:
    """Predicted time of one statement, the bandwidth-only busy time it needs on each resource
    (a lower bound: no latency, peak link bandwidth), and its bottleneck."""

    time_s: object
    busy_s: dict  # resource -> seconds
    bottleneck: str
    # The part of time_s spent by the host issuing the op (NCCL's per-call cost). A host that
    # is ahead of the GPU pays it while earlier kernels run (plan_cost.plan_cost's total).
    host_s: object = 0.0






def max_busy(a: dict, b: dict) -> dict:
    """Busy seconds per resource of two statements that run at the same time on other GPUs."""
    out = dict(a)
    for k, v in b.items():
        out[k] = smax(out.get(k, 0), v)
    return out


def add_busy(a: dict, b: dict) -> dict:
    """Busy seconds per resource of two statements that run on the same GPUs."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


@dataclass(frozen=True)
class ProgramCost:
    """Closed-form time of a whole program (statements run one after another on each rank),
    the per-statement costs, and the bandwidth-only lower bound."""

    time_s: object
    stmts: tuple
    busy_s: dict

    @property
    def lower_bound_s(self):
        """No schedule of these kernels on this machine can be faster: each resource must be
        busy this long and serves one kernel at a time."""
        return smax(*self.busy_s.values()) if self.busy_s else 0


def host_overlapped_total(costs, symbolic: bool = False):
    """Time of statements run one after another on a stream, with the host issuing them ahead.

    CUDA and NCCL calls are asynchronous: the host pays a call's issue cost (`host_s`) while
    the GPU is still running earlier work, so the GPU starts a statement at the later of the
    moment it is free and the moment the host has issued it. A single call therefore costs
    host + GPU time (what a CUDA-event-timed microbenchmark sees), while in a sequence most
    of the host cost hides behind the kernels before it. The simulator runs the same rule.
    """
    zero = sympy.Integer(0) if symbolic else 0.0
    host, gpu = zero, zero
    for c in costs:
        host = host + c.host_s
        start = sympy.Max(gpu, host) if symbolic else max(gpu, host)
        gpu = start + (c.time_s - c.host_s)
    return gpu
