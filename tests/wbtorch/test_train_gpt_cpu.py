"""examples/train_gpt.py's model, data and loss comparison on the CPU (needs torch)."""

from __future__ import annotations

import importlib.util
import math

import pytest
from conftest import ROOT

torch = pytest.importorskip("torch")


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_small_gpt_starts_near_a_uniform_guess_and_batches_repeat():
    gpt = _example("train_gpt")
    data, vocab = gpt.tokens(ROOT / "examples/data/tiny.txt")
    assert data.numel() > 20000 and 40 < vocab < 200
    torch.manual_seed(0)
    model = gpt.GPT(vocab, block=32, layers=2, d=64, heads=4)
    x, y = gpt.batch(data, 5, 0, 4, 32, 0, "cpu")
    x2, y2 = gpt.batch(data, 5, 0, 4, 32, 0, "cpu")
    assert torch.equal(x, x2) and torch.equal(x[:, 1:], y[:, :-1])
    assert not torch.equal(x, gpt.batch(data, 5, 1, 4, 32, 0, "cpu")[0])  # ranks differ
    loss = float(model(x, y))
    assert abs(loss - math.log(vocab)) < 1.0


def test_compare_losses_states_the_tolerance():
    compare = _example("compare_losses").compare
    ok, text = compare([3.0, 2.5], [3.0, 2.5015], rtol=1e-3, atol=1e-4)
    assert ok and "every step within it" in text
    ok, text = compare([3.0, 2.5], [3.0, 2.51], rtol=1e-3, atol=1e-4)
    assert not ok and "1 steps outside it, first 1" in text
    assert compare([1.0], [1.0, 2.0], 1e-3, 0)[0] is False
