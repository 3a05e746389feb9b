"""The optimizer in backward on the CPU (needs torch, no GPU; the device faked as in
test_optimizer_cpu.py: a plan's run is the reference interpreter): buckets launch from
post-accumulate-grad hooks while backward runs, in reverse parameter order, each once a step,
each after a wait on torch's stream and before the step's join; the results equal the
optimizer that runs every bucket after backward, with gradient accumulation, unused
parameters, .grad set to None, and a checkpoint taken mid-training."""

from __future__ import annotations

import pytest
from conftest import ROOT

torch = pytest.importorskip("torch")

import test_optimizer_cpu as base  # noqa: E402

from wbtorch import optim as wopt  # noqa: E402
from wbtorch.programs import ProgramRoleError  # noqa: E402

ADAM, ADAM_FILE = base.ADAM, str(ROOT / "studies/adam.py")
fake = base.fake  # the fixture: the device faked at the optimizer's seams


def _deep(seed=0, unused=False):
    """Three Linear layers (and, `unused`, a fourth that forward never calls)."""
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(8, 30), torch.nn.Tanh(), torch.nn.Linear(30, 30), torch.nn.Tanh(),
              torch.nn.Linear(30, 3)]
    net = torch.nn.Sequential(*layers)
    if unused:
        net.spare = torch.nn.Linear(3, 3)  # registered last: its bucket is the first
    return net


def _twins(unused=False):
    a, b = _deep(unused=unused), _deep(unused=unused)
    b.load_state_dict(a.state_dict())
    return a, b


def _forward(net, x):
    return net[4](net[3](net[2](net[1](net[0](x))))).square().mean()


def _opt(net, overlap, schedule="fuse-rs-c-ag", bucket_bytes=4 * 40, **kw):
    return wopt.DataParallelOptimizer(net.parameters(), ADAM_FILE, schedule,
                                      bucket_bytes=bucket_bytes, overlap=overlap,
                                      log=lambda line: None, **ADAM, **kw)


def _batches(n, seed=3):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(16, 8, generator=gen) for _ in range(n)]


def _train(net, opt, batches, micro=1, zero_module_grads=False):
    """Steps of `micro` micro-batches each (gradient accumulation under no_sync)."""
    for i in range(0, len(batches), micro):
        group = batches[i:i + micro]
        for j, x in enumerate(group):
            if j < len(group) - 1:
                with opt.no_sync():
                    _forward(net, x).backward()
            else:
                _forward(net, x).backward()
        opt.step()
        if zero_module_grads:
            net.zero_grad(set_to_none=True)  # nn.Module's default: .grad becomes None
        else:
            opt.zero_grad()


def _same(a, b):
    for x, y in zip(a.parameters(), b.parameters()):
        assert torch.equal(x, y)


@pytest.mark.parametrize("schedule", ["fuse-rs-c-ag", "unscheduled", "torch"])
def test_overlapped_steps_equal_the_step_after_backward(fake, schedule):
    net, twin = _twins()
    opt, ref = _opt(net, True, schedule), _opt(twin, False, schedule)
    batches = _batches(4)
    _train(net, opt, batches)
    _train(twin, ref, batches)
    _same(net, twin)
    assert opt.step_count == ref.step_count == 4
    a, b = opt.state_dict(), ref.state_dict()
    for i in a["state"]:
        for name in a["state"][i]:
            assert torch.equal(a["state"][i][name], b["state"][i][name])


def test_buckets_launch_during_backward_in_reverse_parameter_order(fake):
    net, _ = _twins()
    opt = _opt(net, True)
    # a 160-byte cap: each of the 6 parameters is a bucket, the last layer's first
    assert [len(b.slots) for b in opt.buckets] == [1] * 6
    assert [b.slots[0].index for b in opt.buckets] == [5, 4, 3, 2, 1, 0]
    seen = {}
    x = _batches(1)[0]
    h = net[0](x)
    # when the gradient reaches the first layer's output, the two later layers' parameters
    # (4 buckets) are accumulated and launched, the first layer's not yet
    def at_h(grad):
        seen["launched"] = list(opt._ready.launched)

    h.register_hook(at_h)
    net[4](net[3](net[2](net[1](h)))).square().mean().backward()
    assert seen["launched"] == [0, 1, 2, 3]
    assert opt._ready.launched == [0, 1, 2, 3, 4, 5]  # all in backward, before step()
    assert [r.bound.runs for r in opt.runs] == [1] * 6
    log = fake["gpu"].log
    assert "join" not in log
    opt.step()
    assert opt.launch_order == [0, 1, 2, 3, 4, 5]
    assert [r.bound.runs for r in opt.runs] == [1] * 6  # step() ran none again
    # each bucket: the side stream waits for torch's stream, then runs the bucket on it
    # (P = 1, generated kernels: straight onto the side stream, no switch of torch's current
    # stream; the shared step scalar is filled there once, before the first bucket); the
    # step ends with torch's stream joining the side stream
    ids = {id(r.bound): k for k, r in enumerate(opt.runs)}
    runs = [(i, ids[e[1]]) for i, e in enumerate(log) if isinstance(e, tuple)]
    assert [k for _, k in runs] == [0, 1, 2, 3, 4, 5]
    assert log[:runs[0][0]] == ["enter", "exit", "wait"]
    for i, _ in runs:
        assert log[i - 1] == "wait"
    assert log.count("enter") == 1 and log[-1] == "join"


def test_every_bucket_runs_once_a_step_with_gradient_accumulation(fake):
    net, twin = _twins()
    opt, ref = _opt(net, True), _opt(twin, False)
    batches = _batches(6)
    _train(net, opt, batches, micro=3)
    _train(twin, ref, batches, micro=3)
    assert [r.bound.runs for r in opt.runs] == [2] * 6  # 2 steps of 3 micro-batches
    _same(net, twin)


def test_a_parameter_without_gradient_leaves_its_bucket_to_the_step(fake):
    net, twin = _twins(unused=True)
    opt, ref = _opt(net, True), _opt(twin, False)
    batches = _batches(3)
    _train(net, opt, batches)
    _train(twin, ref, batches)
    # bucket 0 holds the spare layer (never used) and the last layer's bias: it never
    # completes in backward, and holds back every later bucket (the same order on every rank)
    # until step() runs them all, in order
    assert {s.index for s in opt.buckets[0].slots} == {6, 7, 5}
    _forward(net, batches[0]).backward()
    assert opt._ready.launched == [] and opt._ready.complete == {1, 2, 3, 4, 5}
    opt.step()
    assert opt.launch_order == [0, 1, 2, 3, 4, 5]
    _forward(twin, batches[0]).backward()
    ref.step()
    assert all(r.bound.runs == 4 for r in opt.runs)
    _same(net, twin)


def test_grads_set_to_none_by_the_module_come_back_as_bucket_views(fake):
    net, twin = _twins()
    opt, ref = _opt(net, True), _opt(twin, False)
    batches = _batches(4)
    _train(net, opt, batches, zero_module_grads=True)
    _train(twin, ref, batches)
    _same(net, twin)
    _forward(net, batches[0]).backward()
    for run in opt.runs:
        for slot in run.bucket.slots:
            p = list(net.parameters())[slot.index]
            assert p.grad.data_ptr() == run.g[slot.offset:].data_ptr()


def test_a_checkpoint_mid_training_resumes_the_same(fake):
    net, twin = _twins()
    opt = _opt(net, True)
    batches = _batches(5)
    _train(net, opt, batches[:3])
    sd, weights = opt.state_dict(), {k: v.clone() for k, v in net.state_dict().items()}
    _train(net, opt, batches[3:])
    twin.load_state_dict(weights)
    opt2 = _opt(twin, True, "unscheduled", bucket_bytes=4 * 1000)  # other buckets, schedule
    opt2.load_state_dict(sd)
    assert opt2.step_count == 3
    _train(twin, opt2, batches[3:])
    for a, b in zip(net.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_zero_keeps_the_state_sliced_and_reports_memory(fake):
    net, _ = _twins()
    opt = _opt(net, True, "auto", choose="predict", hardware="h200x4", zero=True)
    assert all(r.keeps_state_sliced() for r in opt.runs)
    assert all(c["chosen"] != "nccl + torch step" and "nccl + torch step" not in
               c["predicted_s"] for c in opt.choices)
    mem = opt.memory()
    n = sum(b.numel for b in opt.buckets)
    # P = 1: a rank's slice is the whole bucket, so slicing saves nothing here
    assert mem == {"weights": 4 * n, "grads": 4 * n, "state": 2 * 4 * n,
                   "state_whole": 2 * 4 * n, "state_saved": 0}
    net2, _ = _twins()
    with pytest.raises(ProgramRoleError, match="zero=True must run a schedule that keeps the "
                       "optimizer state sliced, got rs-c-ag, which keeps m, v whole"):
        _opt(net2, False, "rs-c-ag", zero=True)


def test_zero_at_two_ranks_holds_half_the_state(monkeypatch):
    """Rank 0 of P = 2 (the fake's buffers are the plan's for that rank; nothing runs):
    fuse-rs-c-ag keeps m and v sliced, so the rank holds half of them, and rs-c-ag whole."""

    class Pair(base.FakeGpu):
        P = 2

    monkeypatch.setattr(wopt, "_make_gpu", lambda group: Pair())
    monkeypatch.setattr(wopt, "_GPUS", {})
    monkeypatch.setattr(wopt, "_bind", base.FakeBound)
    mems = {}
    for schedule in ("fuse-rs-c-ag", "rs-c-ag"):
        net, _ = _twins()
        opt = _opt(net, False, schedule, bucket_bytes=4 * 1000)
        mems[schedule] = opt.memory()
    n = sum(b.numel for b in opt.buckets)
    assert all(b.numel % 16 == 0 for b in opt.buckets)  # padded to P x 8
    assert mems["fuse-rs-c-ag"] == {"weights": 4 * n, "grads": 4 * n, "state": 4 * n,
                                    "state_whole": 8 * n, "state_saved": 4 * n}
    assert mems["rs-c-ag"]["state"] == mems["rs-c-ag"]["state_whole"] == 8 * n


@pytest.mark.parametrize("overlap", [True, False])
def test_lent_gradients_are_read_in_place_and_train_the_same(fake, monkeypatch, overlap):
    """P = 1 (design note 82): a parameter of LEND_ALONE_BYTES or more is a bucket of its own
    whose plan reads torch's .grad tensor where backward left it (no copy into the bucket);
    training equals the optimizer that copies every gradient, with accumulation, .grad set to
    None and zeroed in place."""
    monkeypatch.setattr(wopt, "LEND_ALONE_BYTES", 4 * 200)
    net, twin = _twins()
    opt = _opt(net, overlap, bucket_bytes=4 * 1000)
    ref = _opt(twin, overlap, bucket_bytes=4 * 1000, lend_grads=False)
    params = list(net.parameters())
    lenders = [r for r in opt.runs if r.lends]
    # the weight of 240 elements; the one of 900 is alone too but padded to 904 (a multiple
    # of 8), so its plan cannot read the 900-element .grad: copied, as the small ones are
    assert [r.bucket.slots[0].index for r in lenders] == [0]
    assert any(r.bucket.slots[0].index == 2 and len(r.bucket.slots) == 1 for r in opt.runs)
    assert not any(r.lends for r in ref.runs)
    batches = _batches(6)
    _train(net, opt, batches, micro=2)
    _train(twin, ref, batches, micro=2)
    _same(net, twin)
    assert opt.rebinds >= 1 and ref.rebinds == 0
    _forward(net, batches[0]).backward()
    opt.step()
    for r in lenders:
        p = params[r.bucket.slots[0].index]
        assert p.grad.data_ptr() == r.g.data_ptr() != r.own_g.data_ptr()
    opt.zero_grad(set_to_none=False)
    assert all(not p.grad.any() for p in params)
    opt.zero_grad()
    opt.zero_grad(set_to_none=False)  # .grad gone: the plan's own buffer, zeroed, is .grad
    for r in lenders:
        p = params[r.bucket.slots[0].index]
        assert p.grad.data_ptr() == r.g.data_ptr() == r.own_g.data_ptr()
        assert not p.grad.any()


def test_lending_gradients_needs_one_rank(monkeypatch):
    class Pair(base.FakeGpu):
        P = 2

    monkeypatch.setattr(wopt, "_make_gpu", lambda group: Pair())
    monkeypatch.setattr(wopt, "_GPUS", {})
    monkeypatch.setattr(wopt, "_bind", base.FakeBound)
    net, _ = _twins()
    with pytest.raises(ProgramRoleError, match="lend_grads=True must run at P = 1 .* got P = 2"):
        _opt(net, False, lend_grads=True)


def test_in_backward_on_a_model_compiled_whole_and_split_per_block(fake):
    """examples/train_gpt.py --compile-scope split (design note 94) with the optimizer in
    backward: the model traced once, its graph cut per block (aot_eager in place of
    inductor), buckets launched from backward while earlier pieces' backward has not run yet,
    and the weights after three steps equal the eager model's with every bucket after
    backward."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_gpt", ROOT / "examples/train_gpt.py")
    gpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpt)
    torch._dynamo.reset()
    data, vocab = gpt.tokens(ROOT / "examples/data/tiny.txt")
    nets = []
    for _ in range(2):
        torch.manual_seed(0)
        nets.append(gpt.GPT(vocab, block=16, layers=3, d=16, heads=2))
    model, twin = nets
    kw = dict(bucket_bytes=4 * 1200, log=lambda line: None, **ADAM)
    opt = wopt.DataParallelOptimizer(model.parameters(), ADAM_FILE, "fuse-rs-c-ag",
                                     overlap=True, **kw)
    ref = wopt.DataParallelOptimizer(twin.parameters(), ADAM_FILE, "fuse-rs-c-ag", **kw)
    args = gpt.parse(["--optimizer", "workbench", "--compile-scope", "split"])
    net = torch.compile(model, backend=gpt.split_backend(args, model, "aot_eager"))
    seen = []  # the buckets launched when block 0's qkv weight gets its gradient
    qkv0 = model.blocks[0].qkv.weight
    qkv0.register_post_accumulate_grad_hook(lambda p: seen.append(list(opt._ready.launched)))
    mine = next(k for k, b in enumerate(opt.buckets)
                if any(opt.params[s.index] is qkv0 for s in b.slots))
    for step in range(3):
        x, y = gpt.batch(data, step, 0, 2, 16, 0, "cpu")
        net(x, y).backward()
        opt.step()
        opt.zero_grad()
        twin(x, y).backward()
        ref.step()
        ref.zero_grad()
    assert len(opt.buckets) > 3
    # every step: when block 0's qkv weight has its gradient, every bucket up to its own
    # is launched (the optimizer's hook, registered first, launched its own), while the
    # first piece's backward (block 0's first LayerNorm, the embeddings) has not run yet
    assert len(seen) == 3
    assert all(launched == list(range(mine + 1)) for launched in seen)
    assert mine + 1 < len(opt.buckets)
    assert opt.launch_order == list(range(len(opt.buckets)))
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()
