"""The library calls behind GemmStep epilogues and ReduceStep, with torch faked (no GPU): which
torch function each form calls, with which arguments (the GPU run checks the values)."""

from __future__ import annotations

import sys
import types

import pytest

from workbench.runtime.gpu import Gemm, Reduction


class FakeTensor:
    def __init__(self, name):
        self.name = name
        self.copied = None

    def __getitem__(self, rows):
        return self if rows == slice(None) else FakeTensor(f"{self.name}[{rows}]")

    def reshape(self, *shape):
        return self

    def copy_(self, other):
        self.copied = other


@pytest.fixture
def fake_torch(monkeypatch):
    calls = []

    def record(fn):
        def call(*args, **kwargs):
            calls.append((fn, args, kwargs))
            return FakeTensor(fn)
        return call

    torch = types.SimpleNamespace(float64="float64", calls=calls)
    for fn in ("matmul", "addmm", "_addmm_activation", "sum", "prod", "amax", "amin"):
        setattr(torch, fn, record(fn))
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def _gemm(epilogue):
    g = object.__new__(Gemm)
    g.a, g.b, g.c, g.m = FakeTensor("a"), FakeTensor("b"), FakeTensor("c"), 8
    g.epilogue, g.bias = epilogue, FakeTensor("bias")
    return g


@pytest.mark.parametrize("epilogue,want", [
    ("", ("matmul", ("a", "b"), {"out": "c"})),
    ("bias", ("addmm", ("bias", "a", "b"), {"out": "c"})),
    ("bias_relu", ("_addmm_activation", ("bias", "a", "b"), {"out": "c", "use_gelu": False})),
    ("bias_gelu_tanh", ("_addmm_activation", ("bias", "a", "b"),
                        {"out": "c", "use_gelu": True})),
])
def test_a_gemm_epilogue_calls_cublaslt_through_torch(fake_torch, epilogue, want):
    _gemm(epilogue)()
    ((fn, args, kwargs),) = fake_torch.calls
    got = (fn, tuple(a.name for a in args),
           {k: getattr(v, "name", v) for k, v in kwargs.items()})
    assert got == want


@pytest.mark.parametrize("reduce,fn,kwargs", [("add", "sum", {"dtype": "float64"}),
                                              ("mul", "prod", {"dtype": "float64"}),
                                              ("max", "amax", {}), ("min", "amin", {})])
def test_a_library_reduction_accumulates_in_f64_and_stores_once(fake_torch, reduce, fn,
                                                                 kwargs):
    r = object.__new__(Reduction)
    r.x, r.out, r.reduce = FakeTensor("x"), FakeTensor("out"), reduce
    r()
    ((called, args, kw),) = fake_torch.calls
    assert (called, args[0].name, kw) == (fn, "x", kwargs)
    assert r.out.copied.name == fn  # the result, cast into the f32 output by copy_
