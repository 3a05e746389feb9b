"""The tensor-parallel layer on the CPU (needs torch, no GPU): forward through every schedule
of examples/tp_layer.py (plans run by the reference interpreter on rebound torch tensors, as in
test_optimizer_cpu) and torch's backward equal nn.Linear + residual's; bad sizes are named."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_optimizer_cpu import fake  # noqa: E402,F401  (the fixture)

from wbtorch.programs import ProgramRoleError  # noqa: E402

pytestmark = pytest.mark.usefixtures("fake")


@pytest.mark.parametrize("schedule", ["unscheduled", "fuse-ar-c", "overlap-mm-fuse-ar-c",
                                      "torch"])
def test_forward_and_backward_equal_linear_plus_residual(schedule):
    from wbtorch.tp import RowParallelLinear

    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16)
    layer = RowParallelLinear.from_linear(lin, schedule=schedule)
    x = torch.randn(2, 8, 16, requires_grad=True)
    r = torch.randn(2, 8, 16, requires_grad=True)
    out = layer(x, r)
    ref = lin(x) + r
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, [x, r, layer.weight, layer.bias], g)
    want = torch.autograd.grad(ref, [x, r, lin.weight, lin.bias], g)
    torch.testing.assert_close(grads[0], want[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[1], want[1])
    torch.testing.assert_close(grads[2], want[2].t(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[3], want[3], rtol=1e-5, atol=1e-6)
    assert layer.choice == {16: schedule}


def test_bad_layers_are_named():
    from wbtorch.tp import RowParallelLinear

    with pytest.raises(ProgramRoleError, match="square Linear with a bias, got 16 -> 8"):
        RowParallelLinear.from_linear(torch.nn.Linear(16, 8))
    with pytest.raises(ProgramRoleError, match="got 'fuse-all'"):
        RowParallelLinear(16, schedule="fuse-all")
    layer = RowParallelLinear(16, schedule="torch")
    with pytest.raises(ProgramRoleError, match=r"same shape \[..., 16\], got \(4, 8\) and "
                       r"\(4, 16\); pass the whole input"):
        layer(torch.zeros(4, 8), torch.zeros(4, 16))


class _Block(torch.nn.Module):
    """A residual block whose projection + residual add is the row-parallel layer (as
    examples/train_gpt.py's --tp), with torch ops around it for the compiler to trace."""

    def __init__(self, layer):
        super().__init__()
        self.pre = torch.nn.Linear(16, 16)
        self.tp = layer

    def forward(self, x):
        return self.tp(torch.tanh(self.pre(x)), x).square()


@pytest.mark.parametrize("schedule", ["torch", "overlap-mm-fuse-ar-c"])
def test_compiles_whole_graph_and_matches_eager(schedule):
    """fullgraph=True fails on any graph break: the layer is one opaque custom op to Dynamo
    (design note 56). The default backend, inductor (C++ on the CPU, gcc), as train_gpt.py's."""
    from wbtorch.tp import RowParallelLinear

    torch.manual_seed(0)
    layer = RowParallelLinear.from_linear(torch.nn.Linear(16, 16), schedule=schedule)
    model = _Block(layer)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    x = torch.randn(2, 8, 16)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    ref = model(xe)
    out = compiled(xc)
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(ref)
    params = list(model.parameters())
    want = torch.autograd.grad(ref, [xe, *params], g)
    got = torch.autograd.grad(out, [xc, *params], g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert layer.choice == {16: schedule}


def test_custom_op_passes_torch_opcheck():
    """torch.library.opcheck: the op's schema, fake implementation and registered backward agree
    with its real implementation (what torch.compile relies on)."""
    from wbtorch.tp import RowParallelLinear, row_parallel_forward

    torch.manual_seed(0)
    layer = RowParallelLinear(16, schedule="torch")
    x = torch.randn(4, 16, requires_grad=True)
    args = (x, x[:, :16].detach().clone().requires_grad_(), torch.randn(4, 16, requires_grad=True),
            layer.weight, layer.bias, layer.key)
    torch.library.opcheck(row_parallel_forward, args)


class _TwoRankDist:
    """torch.distributed's two collectives the layer calls, as rank 0 of P = 2 whose other rank
    contributes known tensors (its partial product forward, its input-gradient columns back)."""

    def __init__(self, other_y, other_grad):
        self.other_y, self.other_grad = other_y, other_grad

    def all_reduce(self, y, group=None):
        y += self.other_y

    def all_gather_into_tensor(self, parts, t, group=None):
        parts[0].copy_(t)
        parts[1].copy_(self.other_grad)


@pytest.mark.parametrize("compiled", [False, True])
def test_two_ranks_gather_the_input_gradient(monkeypatch, compiled):
    """At P = 2 the forward all-reduces the partial products and the backward all-gathers the
    input gradient's columns (the second custom op, traced whole under fullgraph=True)."""
    from test_optimizer_cpu import FakeGpu

    from wbtorch import optim as wopt
    from wbtorch.tp import RowParallelLinear

    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16)
    x = torch.randn(8, 16)
    r = torch.randn(8, 16)
    g = torch.randn(8, 16)
    w = lin.weight.detach().t()  # (in x out); rank 1 holds rows 8..15
    dist = _TwoRankDist(x[:, 8:] @ w[8:], g @ w[8:].t())
    gpu = FakeGpu()
    gpu.P, gpu.dist = 2, dist
    monkeypatch.setattr(wopt, "_make_gpu", lambda group: gpu)
    layer = RowParallelLinear.from_linear(lin, schedule="torch")
    fn = torch.compile(layer, fullgraph=True, backend="aot_eager") if compiled else layer
    torch._dynamo.reset()
    xl, rl = x.clone().requires_grad_(), r.clone().requires_grad_()
    xr, rr = x.clone().requires_grad_(), r.clone().requires_grad_()
    out = fn(xl, rl)
    ref = lin(xr) + rr
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    gx, gr = torch.autograd.grad(out, [xl, rl], g)
    wx, wr = torch.autograd.grad(ref, [xr, rr], g)
    torch.testing.assert_close(gx, wx, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gr, wr)


@pytest.mark.parametrize("compiled", [False, True])
def test_auto_at_one_rank_is_traced_torch_code(monkeypatch, compiled):
    """P = 1, schedule 'auto': nothing to all-reduce, so the layer is x @ W + b + residual in
    torch ops (the compiler fuses the epilogue as it does nn.Linear's; design note 83): the
    custom op never runs, no schedule is chosen, and values and gradients are nn.Linear's."""
    from wbtorch import tp
    from wbtorch.tp import RowParallelLinear

    def refuse(*args):
        raise AssertionError("the custom op must not run at P = 1 with schedule 'auto'")

    monkeypatch.setattr(tp, "row_parallel_forward", refuse)
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16)
    layer = RowParallelLinear.from_linear(lin)
    assert layer.direct
    fn = torch.compile(layer, fullgraph=True, backend="aot_eager") if compiled else layer
    x = torch.randn(2, 8, 16, requires_grad=True)
    r = torch.randn(2, 8, 16, requires_grad=True)
    out = fn(x, r)
    ref = lin(x) + r
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, [x, r, layer.weight, layer.bias], g)
    want = torch.autograd.grad(ref, [x, r, lin.weight, lin.bias], g)
    for a, b in zip(grads, [want[0], want[1], want[2].t(), want[3]]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert layer.choice == {}
