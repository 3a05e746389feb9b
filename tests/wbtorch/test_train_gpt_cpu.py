"""examples/train_gpt.py's model, data, options and loss check on the CPU (needs torch)."""

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
