"""The data-parallel optimizer's torch side on the CPU (needs torch, no GPU): parameters and
gradients as views of the bucket buffers, the step, zero_grad, state_dict either way, the
replica check and the choice logged. The device is faked at the optimizer's two seams
(wbtorch.optim._make_gpu, _bind): a plan's buffers are CPU tensors and its run is the reference
interpreter, so the numbers are the program's, not a stub's."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT

torch = pytest.importorskip("torch")

from wbtorch import optim as wopt  # noqa: E402
from wbtorch.programs import ProgramRoleError  # noqa: E402
from workbench import interpreter  # noqa: E402

ADAM = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8)


class FakeHost:
    def __init__(self, others=None):
        self.others = others or []

    def bcast(self, obj, root=0):
        return obj


class FakeSide:
    """A side stream on the CPU: everything runs at once, in program order, so values are
    the same as on one stream; what the optimizer asks of the stream is logged (`log`) so
    that tests can check the order of waits, runs and joins."""

    def __init__(self, log):
        self.log = log

    def wait_current(self):
        self.log.append("wait")

    def join(self):
        self.log.append("join")

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, *exc):
        self.log.append("exit")


class FakeGpu:
    """P = 1 on the CPU; `others` are the checksums other ranks report (replica check)."""

    P, rank, dist = 1, 0, None

    def __init__(self, others=None):
        self.others = others or []
        self.comm = type("C", (), {"host": FakeHost()})()
        self.log: list = []  # the side stream's calls, and bucket runs on it

    def side_stream(self):
        return FakeSide(self.log)

    def all_gather(self, obj):
        return [obj, *self.others]

    def synchronize(self):
        pass


class FakeBound:
    """A plan's buffers as CPU tensors; run() is the reference interpreter at P = 1."""

    def __init__(self, gpu, plan, sizes, blocks_per_sm=None):
        self.gpu, self.plan, self.sizes = gpu, plan, sizes
        bound = interpreter.bind_sizes(plan.program, sizes)
        self.bound = {**bound}
        from codegen.plan import RANK

        self.bound[RANK] = 0
        dt = {"f32": torch.float32, "f16": torch.float16, "f64": torch.float64,
              "u32": torch.int32}
        self.buf = {b.name: torch.zeros(max(1, self._int(b.numel)), dtype=dt[b.dtype])
                    for b in plan.buffers}
        self.runs = 0

    def _int(self, e):
        import sympy

        return int(sympy.sympify(e).subs(self.bound))

    def view(self, name):
        loc = self.plan.locs[name]
        a = self._int(loc.offset)
        return self.buf[loc.buffer][a:a + self._int(loc.numel)]

    def run(self, side=None):
        self.runs += 1
        if side is not None:
            self.gpu.log.append(("run", id(self)))
        prog = self.plan.program
        ins = {}
        from workbench.types import LocalLayout

        for v in prog.inputs:
            shape = interpreter.concrete_shape(v.type, self.bound)
            if isinstance(v.type.layout, LocalLayout):
                shape = (1, *shape)
            ins[v.name] = self.view(v.name).detach().numpy().copy().reshape(shape)
        outs = interpreter.run(prog, ins, self.sizes)
        for v in prog.outputs:
            self.view(v.name).copy_(torch.from_numpy(np.asarray(outs[v.name]).reshape(-1)))

    def rebind(self, tensors):
        for name, t in tensors.items():  # the fake's buffers become the tensors themselves
            self.buf[self.plan.locs[name].buffer] = t.reshape(-1)

    def free(self):
        pass


@pytest.fixture
def fake(monkeypatch):
    made = {}

    def make_gpu(group):
        made["gpu"] = FakeGpu(made.get("others"))
        return made["gpu"]

    monkeypatch.setattr(wopt, "_make_gpu", make_gpu)
    monkeypatch.setattr(wopt, "_GPUS", {})
    monkeypatch.setattr(wopt, "_bind", FakeBound)
    return made


def _nets(seed=0):
    torch.manual_seed(seed)
    a = torch.nn.Sequential(torch.nn.Linear(8, 30), torch.nn.Tanh(), torch.nn.Linear(30, 3))
    b = torch.nn.Sequential(torch.nn.Linear(8, 30), torch.nn.Tanh(), torch.nn.Linear(30, 3))
    b.load_state_dict(a.state_dict())
    return a, b


def _train(net, opt, steps):
    gen = torch.Generator().manual_seed(3)
    for _ in range(steps):
        net(torch.randn(16, 8, generator=gen)).square().mean().backward()
        opt.step()
        opt.zero_grad()


@pytest.mark.parametrize("schedule", ["unscheduled", "rs-c-ag", "fuse-rs-c-ag", "torch"])
def test_steps_match_torch_adam_and_params_are_bucket_views(fake, schedule):
    net, ref_net = _nets()
    logs = []
    opt = wopt.DataParallelOptimizer(net.parameters(), str(ROOT / "studies/adam.py"), schedule,
                                     bucket_bytes=4 * 150, log=logs.append, **ADAM)
    # 4 parameters (240, 30, 90, 3 elements), reversed: 3 + 90 + 30 = 123 (padded to 128),
    # then 240 alone (larger than the cap)
    assert [b.numel for b in opt.buckets] == [128, 240]
    assert any("padded by" in line for line in logs)
    for run in opt.runs:
        for slot in run.bucket.slots:
            p = list(net.parameters())[slot.index]
            assert p.data.data_ptr() == run.w[slot.offset:].data_ptr()
            assert p.grad.data_ptr() == run.g[slot.offset:].data_ptr()
    ref = torch.optim.Adam(ref_net.parameters(), lr=1e-2, foreach=False)
    _train(net, opt, 4)
    _train(ref_net, ref, 4)
    for a, b in zip(net.parameters(), ref_net.parameters()):
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-6)
    assert all(p.grad is None for p in net.parameters())  # zero_grad: as torch's
    net(torch.randn(2, 8)).sum().backward()
    opt.step()  # the new gradients were copied into the buckets: .grad is the view again
    for run in opt.runs:
        for slot in run.bucket.slots:
            p = list(net.parameters())[slot.index]
            assert p.grad.data_ptr() == run.g[slot.offset:].data_ptr()
    opt.zero_grad(set_to_none=False)
    assert all(not p.grad.any() for p in net.parameters())  # zeroed in place, still views
    if schedule != "torch":
        assert all(r.bound.runs == 5 for r in opt.runs)  # 4 steps, and the one above


def test_state_dict_round_trips_between_schedules(fake):
    net, net2 = _nets()
    opt = wopt.DataParallelOptimizer(net.parameters(), str(ROOT / "studies/adam.py"),
                                     "fuse-rs-c-ag", **ADAM)
    _train(net, opt, 3)
    sd = opt.state_dict()
    assert sd["step"] == 3 and sorted(sd["state"]) == [0, 1, 2, 3]
    assert sd["state"][0]["m"].shape == (30, 8) and sd["state"][0]["m"].abs().sum() > 0
    net2.load_state_dict(net.state_dict())
    opt2 = wopt.DataParallelOptimizer(net2.parameters(), str(ROOT / "studies/adam.py"),
                                      "unscheduled", bucket_bytes=200, **ADAM)
    opt2.load_state_dict(sd)
    _train(net, opt, 1)
    _train(net2, opt2, 1)
    for a, b in zip(net.parameters(), net2.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    with pytest.raises(ProgramRoleError, match="state_dict must come from the same program"):
        opt2.load_state_dict({**sd, "program": "studies/sgd.py"})


def test_parameters_that_differ_across_ranks(fake):
    net, _ = _nets()
    sums = torch.stack([torch.stack([p.detach().double().sum(), p.detach().double().square().sum()])
                        for p in net.parameters()]).numpy().tolist()
    sums[2][0] += 1.0
    fake["others"] = [sums]
    with pytest.raises(ProgramRoleError, match=r"parameters must be the same on every rank at "
                       r"start, got parameter 2 \(shape \(3, 30\)\) different on rank 1 from "
                       r"rank 0; seed every rank alike"):
        wopt.DataParallelOptimizer(net.parameters(), str(ROOT / "studies/adam.py"),
                                   "unscheduled", **ADAM)


def test_predicted_choice_is_logged_per_bucket(fake):
    net, _ = _nets()
    logs = []
    opt = wopt.DataParallelOptimizer(net.parameters(), str(ROOT / "studies/sgd.py"), "auto",
                                     choose="predict", hardware="h200x4", log=logs.append,
                                     lr=0.1)
    assert len(opt.choices) == len(opt.buckets) == 1
    c = opt.choices[0]
    assert c["chosen"] in c["predicted_s"] and all(t > 0 for t in c["predicted_s"].values())
    assert any(line.startswith("[wbtorch] bucket 0 (N = ") and "chose" in line for line in logs)


def test_sgd_and_lamb_programs_run(fake):
    for spec, hyper in [("studies/sgd.py", dict(lr=0.1)),
                        ("studies/lamb.py", dict(ADAM, wd=0.01)),
                        ("studies/sgd_momentum.py", dict(lr=0.1, mu=0.9))]:
        net, ref_net = _nets()
        opt = wopt.DataParallelOptimizer(net.parameters(), str(ROOT / spec), "fuse-rs-c-ag",
                                         **hyper)
        _train(net, opt, 2)
        moved = sum(float((a - b).detach().abs().sum()) for a, b in zip(net.parameters(),
                                                                ref_net.parameters()))
        assert moved > 0
        if spec.endswith("sgd.py"):
            ref = torch.optim.SGD(ref_net.parameters(), lr=0.1)
            _train(ref_net, ref, 2)
            for a, b in zip(net.parameters(), ref_net.parameters()):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        if "momentum" in spec:
            ref = torch.optim.SGD(ref_net.parameters(), lr=0.1, momentum=0.9)
            _train(ref_net, ref, 2)
            for a, b in zip(net.parameters(), ref_net.parameters()):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_bad_arguments_are_named(fake):
    net, _ = _nets()
    spec = str(ROOT / "studies/adam.py")
    with pytest.raises(ProgramRoleError, match=r"got missing \['eps'\]"):
        wopt.DataParallelOptimizer(net.parameters(), spec, "unscheduled", lr=1, beta1=.9,
                                   beta2=.9)
    with pytest.raises(ProgramRoleError, match="choose='predict' must name the hardware"):
        wopt.DataParallelOptimizer(net.parameters(), spec, "auto", choose="predict", **ADAM)
    with pytest.raises(ProgramRoleError, match="got 'fuse-all'"):
        wopt.DataParallelOptimizer(net.parameters(), spec, "fuse-all", **ADAM)
    with pytest.raises(ProgramRoleError, match="gradients must be float32"):
        wopt.DataParallelOptimizer(net.double().parameters(), spec, "unscheduled", **ADAM)
