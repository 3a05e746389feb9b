"""BoundPlan.rebind's relocation without a GPU (design note 82): a rebound buffer's new
address replaces the old one in every prepared kernel argument that held it, and nothing else
changes; a plan with other kinds of launches is prepared again."""

from __future__ import annotations

import types

import numpy as np
from conftest import ROOT

from codegen.lower import lower
from wbtorch.programs import pick_schedule
from workbench.loader import load
from workbench.runtime.launches import KernelLaunch
from workbench.runtime.torch_bridge import BoundPlan


def _bound(launches, ptr, steps=()):
    bound = object.__new__(BoundPlan)
    bound.run_ = types.SimpleNamespace(launches=launches, ptr=ptr, steps=list(steps),
                                       prepare=lambda step: ("prepared", step))
    return bound


def _kernel(plan, ptr):
    """The fused Adam kernel's launch as _prepare_kernel lays out its arguments at P = 1
    (buffers and this rank's peer copies: the buffers' addresses; every other kind: 7)."""
    step = plan.steps[0]
    args = [np.uintp(ptr[p.ref]) if p.kind in ("buf", "peer", "flags") else np.int64(7)
            for p in step.spec.params]
    return KernelLaunch(step, None, 1, args)


def test_a_moved_buffer_is_relocated_in_every_argument_that_held_it():
    loaded = load(str(ROOT / "studies/adam.py"))
    plan = lower(pick_schedule(loaded, "fuse-rs-c-ag"), 1)
    names = sorted({p.ref for p in plan.steps[0].spec.params if p.ref})
    ptr = {n: 0x1000 * (i + 1) for i, n in enumerate(names)}
    item = _kernel(plan, ptr)
    before = list(item.args)
    bound = _bound([item], ptr)
    bound._relocate({ptr["g"]: 0xABC000})
    params = plan.steps[0].spec.params
    held_g = [j for j, p in enumerate(params) if p.ref == "g" and p.kind in ("buf", "peer")]
    assert held_g  # the gradient is an argument (its peer copy, this rank's own at P = 1)
    for j, (a, b) in enumerate(zip(before, item.args)):
        assert int(b) == (0xABC000 if j in held_g else int(a))
    assert all(type(b) is type(a) for a, b in zip(before, item.args))


def test_a_plan_with_other_launches_is_prepared_again():
    bound = _bound(["an nccl call"], {}, steps=["s0", "s1"])
    bound._relocate({1: 2})
    assert bound.run_.launches == [("prepared", "s0"), ("prepared", "s1")]
