"""examples/train_gpt.py's model, data, options and loss check on the CPU (needs torch)."""

from __future__ import annotations

import importlib.util
import math
import random

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
    loss = float(model(x, y).detach())
    assert abs(loss - math.log(vocab)) < 1.0


# --- options as torchrun passes them

def _torchrun():
    from torch.distributed.run import get_args_parser

    return get_args_parser()


def test_the_readme_launch_line_parses_through_torchrun():
    gpt = _example("train_gpt")
    script = ["--optimizer", "workbench", "--overlap", "--compile-scope", "blocks",
              "--model-dim", "1024", "--layers", "8", "--steps", "60", "--bucket-mb", "25",
              "--warmup-steps", "10", "--out", "b.json"]
    launched = _torchrun().parse_args(["--nproc_per_node=2", "examples/train_gpt.py", *script])
    assert launched.training_script_args == script
    args = gpt.parse(launched.training_script_args)
    assert (args.model_dim, args.layers, args.overlap, args.compile_scope) == (1024, 8, True,
                                                                              "blocks")
    assert gpt.variant(args) == "workbench overlap, compile blocks"


def test_every_launch_line_of_the_readme_and_the_script_parses():
    """The torchrun lines of README.md and of train_gpt.py's docstring, through torchrun's
    parser and then the script's."""
    import shlex

    gpt = _example("train_gpt")
    text = (ROOT / "README.md").read_text() + gpt.__doc__
    lines = text.replace("\\\n", " ").splitlines()
    launches = [ln.strip() for ln in lines if "torchrun" in ln and "train_gpt.py" in ln]
    assert len(launches) >= 5
    for line in launches:
        argv = shlex.split(line[line.index("torchrun"):].split("`")[0])[1:]
        launched = _torchrun().parse_args(argv)
        assert launched.training_script.endswith("train_gpt.py")
        gpt.parse(launched.training_script_args)


def test_no_option_of_the_script_is_a_prefix_of_a_torchrun_option():
    gpt = _example("train_gpt")
    ours = [s for a in gpt.parser()._actions for s in a.option_strings if s != "--help"]
    theirs = [s for a in _torchrun()._actions for s in a.option_strings]
    assert "--model-dim" in ours and len(ours) > 20
    assert [(o, t) for o in ours for t in theirs if t != o and t.startswith(o)] == []
    # the old width option was one: torchrun's parser stops at it
    with pytest.raises(SystemExit):
        _torchrun().parse_args(["--nproc_per_node=1", "examples/train_gpt.py", "--d", "1024"])


def test_runs_that_cannot_go_ahead_exit_2_with_the_reason(capsys):
    gpt = _example("train_gpt")
    if not torch.cuda.is_available():  # this machine: the script says so and exits 2
        assert gpt.main(["--optimizer", "torch"]) == 2
        assert "a CUDA GPU must be present to train, got torch.cuda.is_available() False" \
            in capsys.readouterr().err
    why = gpt.refused(gpt.parse(["--optimizer", "torch", "--no-ddp"]), 2, True)
    assert why.startswith("--no-ddp must run at world size 1")
    why = gpt.refused(gpt.parse(["--optimizer", "torch", "--overlap"]), 1, True)
    assert why.startswith("--overlap and --zero must run with --optimizer workbench")
    assert gpt.refused(gpt.parse(["--optimizer", "workbench", "--zero"]), 2, True) is None
    why = gpt.refused(gpt.parse(["--optimizer", "torch", "--fused-grid", "32"]), 2, True)
    assert why.startswith("--fused-grid must be a block count >= 1 with --optimizer workbench")
    assert gpt.refused(gpt.parse(["--optimizer", "workbench", "--fused-grid", "0"]), 2,
                       True).startswith("--fused-grid must be a block count >= 1")
    args = gpt.parse(["--optimizer", "workbench", "--overlap", "--fused-grid", "32"])
    assert gpt.refused(args, 2, True) is None
    assert gpt.variant(args) == "workbench overlap grid 32, compile model"
    why = gpt.refused(gpt.parse(["--optimizer", "torch", "--compile-scope", "split"]), 2, True)
    assert why.startswith("--compile-scope split must run without DDP")
    assert gpt.refused(gpt.parse(["--optimizer", "torch", "--no-ddp", "--compile-scope",
                                  "split"]), 1, True) is None
    why = gpt.refused(gpt.parse(["--optimizer", "workbench", "--torch-sharding", "zero1"]), 2,
                      True)
    assert why == ("--torch-sharding must run with --optimizer torch, got --optimizer "
                   "workbench; the workbench slices its state with --zero")
    for extra, got in ((["--no-ddp"], "--no-ddp"),
                       (["--precision", "bf16-params"], "--precision bf16-params"),
                       (["--compile-scope", "split"], "--compile-scope split")):
        why = gpt.refused(gpt.parse(["--optimizer", "torch", "--torch-sharding", "fsdp2",
                                     *extra]), 1, True)
        assert why == ("--torch-sharding fsdp2 must run over the group with fp32 or bf16 "
                       "parameters and the model compiled whole or by blocks, got "
                       f"{got}; drop it")
    for kind, name in (("zero1", "torch ddp 25MB zero1"), ("fsdp2", "torch fsdp2")):
        args = gpt.parse(["--optimizer", "torch", "--torch-sharding", kind])
        assert gpt.refused(args, 2, True) is None
        assert gpt.variant(args) == f"{name}, compile model"


def test_torchs_sharded_baselines_step_as_plain_adamw_does():
    """--torch-sharding's two baselines (ZeroRedundancyOptimizer inside DDP; fully_shard per
    block) on the CPU at world size 1 (gloo): three steps of the small GPT leave the same
    parameters as AdamW without sharding, so a GPU run times the same optimization."""
    import copy
    import os
    import socket

    import torch.distributed as dist

    gpt = _example("train_gpt")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    fresh = not dist.is_initialized()
    if fresh:
        dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        data, vocab = gpt.tokens(ROOT / "examples/data/tiny.txt")
        torch.manual_seed(0)
        base = gpt.GPT(vocab, block=16, layers=2, d=32, heads=2)
        kw = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
        cpu = torch.device("cpu")
        runs = {}
        for kind in (None, "zero1", "fsdp2"):
            args = gpt.parse(["--optimizer", "torch"]
                             + (["--torch-sharding", kind] if kind else []))
            model = copy.deepcopy(base)
            net, opt, choices = gpt.torch_side(args, model, cpu, kw)
            for step in range(3):
                x, y = gpt.batch(data, step, 0, 2, 16, 0, cpu)
                opt.zero_grad()
                net(x, y).backward()
                opt.step()
            with torch.no_grad():
                runs[kind] = [(p.full_tensor() if hasattr(p, "full_tensor") else p).clone()
                              for p in model.parameters()]
            assert len(choices) == 1
        with torch.no_grad():
            moved = max(float((a - b).abs().max())
                        for a, b in zip(runs[None], base.parameters()))
        assert moved > 1e-3  # the steps changed the weights
        for kind in ("zero1", "fsdp2"):
            assert max(float((a - b).abs().max())
                       for a, b in zip(runs[kind], runs[None])) < 1e-5, kind
    finally:
        if fresh:
            dist.destroy_process_group()


# --- the loss check against torch's own noise

def _curves(steps=60, seed=0, noise=1e-3):
    """A decaying loss curve, and a second run of it whose difference grows like a random
    walk (chaotic divergence of two fp32 trainings)."""
    rnd = random.Random(seed)
    ref = [4.0 * math.exp(-i / 30) + 1.0 for i in range(steps)]
    walk, other = 0.0, []
    for i, r in enumerate(ref):
        walk += rnd.gauss(0, noise) * (i > 2)  # the first steps agree exactly
        other.append(r + walk)
    return ref, other


def test_a_run_inside_torchs_noise_matches():
    check = _example("compare_losses")
    ref, noise = _curves(seed=0)
    _, run = _curves(seed=1)
    ok, text = check.compare_with_noise(ref, run, [noise])
    assert ok and "every step within it" in text
    # the fixed tolerance of before calls the same run a mismatch
    assert not check.compare(ref, run, rtol=1e-4, atol=1e-5)[0]


def test_the_envelope_rarely_flags_noise_and_always_catches_an_offset():
    """Over 100 synthetic triples (ref, noise, run; the run drawn like the noise run), the
    envelope of one noise run calls about 1 in 8 a MISMATCH; a wrong update that moves the
    loss by 0.1 from step 40 is caught every time, at step 40."""
    check = _example("compare_losses")
    false, caught = 0, 0
    for s in range(100):
        ref, noise = _curves(seed=1000 + s)
        _, run = _curves(seed=2000 + s)
        false += not check.compare_with_noise(ref, run, [noise])[0]
        bug = [x + (0.1 if i >= 40 else 0.0) for i, x in enumerate(run)]
        tol = check.envelope(ref, [noise])
        caught += 40 in check.outside(ref, bug, tol)
    assert false <= 15 and caught == 100


def test_a_run_outside_the_envelope_names_its_steps():
    check = _example("compare_losses")
    ref, noise = _curves(seed=0)
    _, run = _curves(seed=1)
    bug = [x + (0.2 if i >= 40 else 0.0) for i, x in enumerate(run)]  # a wrong update at 40
    ok, text = check.compare_with_noise(ref, bug, [noise])
    assert not ok
    assert "20 steps outside it: 40 (|diff| " in text and "and 10 more" in text


def test_the_envelope_is_the_largest_noise_up_to_a_little_later_times_the_factor():
    check = _example("compare_losses")
    ref = [3.0, 3.0, 3.0, 3.0]
    noise = [[3.0, 3.01, 3.0, 3.02], [3.0, 3.0, 3.015, 3.0]]
    tol = check.envelope(ref, noise, factor=2, rtol=0, atol=0, look=0)
    assert tol == pytest.approx([0.0, 0.02, 0.03, 0.04])
    tol = check.envelope(ref, noise, factor=2, rtol=0, atol=0, look=1)
    assert tol == pytest.approx([0.02, 0.03, 0.04, 0.04])
    with pytest.raises(ValueError, match="noise runs must have as many steps as the "
                       "reference, got 2 and 4"):
        check.envelope(ref, [[3.0, 3.0]])


def test_compare_losses_states_the_fixed_tolerance():
    compare = _example("compare_losses").compare
    ok, text = compare([3.0, 2.5], [3.0, 2.5015], rtol=1e-3, atol=1e-4)
    assert ok and "every step within it" in text
    ok, text = compare([3.0, 2.5], [3.0, 2.51], rtol=1e-3, atol=1e-4)
    assert not ok and "1 steps outside it: 1 (|diff| 0.01 > 0.0026)" in text
    assert compare([1.0], [1.0, 2.0], 1e-3, 0)[0] is False


def test_a_missing_loss_file_is_named_with_exit_2(tmp_path, capsys):
    """A noise run that was not run (GPU run 34 left bf16p-n out) is one message and exit 2,
    not a traceback."""
    main = _example("compare_losses").main
    ref = tmp_path / "ref.json"
    ref.write_text('{"losses": [3.0], "choices": [], "optimizer": "torch"}')
    missing = tmp_path / "1_101m_bf16p-n.json"
    assert main([str(ref), str(ref), "--noise", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"loss file {missing} must exist" in err and "run that variant first" in err


def test_split_compile_has_one_backward_node_per_block_and_hands_gradients_over_early():
    """--compile-scope split (design note 93): the whole model is traced once and its graph
    cut every block's parameter bytes, so backward runs one compiled node per piece, and the
    last block's gradients are accumulated (post-accumulate-grad hooks fire) before the first
    block's backward runs: what the optimizer in backward needs, without a compile per block.
    (aot_eager stands in for inductor: the split is the same, and CI need not compile C++.)"""
    gpt = _example("train_gpt")
    torch._dynamo.reset()
    data, vocab = gpt.tokens(ROOT / "examples/data/tiny.txt")
    torch.manual_seed(0)
    model = gpt.GPT(vocab, block=16, layers=3, d=32, heads=4)
    args = gpt.parse(["--optimizer", "workbench", "--compile-scope", "split"])
    assert gpt.split_bytes(args, model) == sum(p.numel() * 4 for p in model.blocks[0].parameters())
    assert gpt.split_bytes(gpt.parse(["--optimizer", "workbench", "--split-mb", "2"]),
                           model) == 2 * 2**20
    net = torch.compile(model, backend=gpt.split_backend(args, model, "aot_eager"))
    order = []
    index = {id(p): i for i, p in enumerate(model.parameters())}
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: order.append(index[id(p)]))
    first_block = {index[id(p)] for p in model.blocks[0].parameters()}
    last_block = {index[id(p)] for p in model.blocks[-1].parameters()}
    x, y = gpt.batch(data, 0, 0, 2, 16, 0, "cpu")
    loss = net(x, y)
    nodes, stack, seen = [], [loss.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        nodes.append(type(fn).__name__)
        stack.extend(n for n, _ in fn.next_functions)
    assert 3 <= nodes.count("CompiledFunctionBackward") <= 5  # ~ one per block (+ ends)
    loss.backward()
    assert sorted(order) == list(range(len(index)))
    assert max(order.index(i) for i in last_block) < min(order.index(i) for i in first_block)
    torch._dynamo.reset()


def test_cudagraphs_put_inductors_graphs_on_every_piece_of_the_split(monkeypatch):
    """--cudagraphs (GPU run 36: the split's pieces kept the host at the GPU's pace): the whole
    model compiles in reduce-overhead mode, and each piece of --compile-scope split through
    inductor with its CUDA graphs on; without a compile it is refused."""
    import torch._inductor.compile_fx as cfx

    gpt = _example("train_gpt")
    plain = gpt.parse(["--optimizer", "workbench", "--compile-scope", "split"])
    assert gpt.piece_compiler(plain) == "inductor"
    args = gpt.parse(["--optimizer", "workbench", "--overlap", "--compile-scope", "split",
                      "--cudagraphs"])
    assert gpt.refused(args, 1, True) is None
    assert gpt.variant(args) == "workbench overlap, compile split cudagraphs"
    seen = []
    monkeypatch.setattr(cfx, "compile_fx", lambda gm, ex, **kw: seen.append(kw) or gm)
    graph = torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
    assert gpt.piece_compiler(args)(graph, [torch.zeros(1, 2)]) is graph
    assert seen == [{"config_patches": {"triton.cudagraphs": True}}]
    why = gpt.refused(gpt.parse(["--optimizer", "torch", "--no-compile", "--cudagraphs"]), 1,
                      True)
    assert why == "--cudagraphs must run with torch.compile, got --no-compile; drop one"
