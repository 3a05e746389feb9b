"""The index kernels bound to a rank without a GPU (issue 39 item 2): the runtime's
_prepare_kernel gives a top-k kernel a warp per row (runtime.chunked.topk_grid) and a gather
kernel the elementwise grid, each with its parameters in order (sizes bound, the rank)."""

from __future__ import annotations

import types

import numpy as np
import sympy
from conftest import ROOT

from codegen.lower import lower
from codegen.plan import KernelStep
from workbench.loader import load
from workbench.runtime.chunked import elementwise_grid, topk_grid
from workbench.runtime.executor import _prepare_kernel


class FakeFunction:
    def prepare(self, sig):
        self.sig = sig


def _run(plan, sizes: dict):
    bound = {s: sizes[s.name] for s in plan.program.symbols()}
    gpu = types.SimpleNamespace(function=lambda name, source: FakeFunction(), sm_count=132)
    return types.SimpleNamespace(
        gpu=gpu, plan=plan, ptr={b.name: 4096 * (i + 1) for i, b in enumerate(plan.buffers)},
        bound=bound, local=1, int_of=lambda e: int(sympy.sympify(e).subs(bound)))


def _steps(spec: str, P: int, kind: str):
    plan = lower(load(str(ROOT / spec)).program, P)
    return plan, [s for s in plan.steps if isinstance(s, KernelStep) and s.spec.kind == kind]


def test_a_top_k_kernel_gets_a_warp_per_row():
    plan, steps = _steps("studies/moe_router.py", 2, "topk")
    sizes = {"T": 8 * 131 * 2, "H": 256, "P": 2}
    for step in steps:
        launch = _prepare_kernel(_run(plan, sizes), step)
        rows = sizes["T"] // 2
        assert launch.grid == topk_grid(rows, 132) == -(-rows // 16)
        assert launch.fn.sig == "PP" + "q" + "i"  # x, the output, T, rank
        assert launch.args[2] == np.int64(sizes["T"]) and launch.args[3] == np.int32(1)


def test_a_gather_kernel_gets_the_elementwise_grid():
    plan, (step,) = _steps("studies/vocab_parallel_embedding.py", 4, "gather")
    sizes = {"V": 64, "H": 264, "T": 256, "P": 4}
    launch = _prepare_kernel(_run(plan, sizes), step)
    assert launch.grid == elementwise_grid(256 * 264, step.spec.vec, 132)
    assert [p.name for p in step.spec.params] == ["p_E", "p_e", "p_ids", "H", "T", "size_V",
                                                  "rank"]
