"""Schedules that follow the program, not its spelling (issue 24 item 4): reorder names the
hidden statements it would leave behind, keeps a scalar where it is, fuse inlines a scalar
clip factor, and the autotuner finds the fused clipped Adam written with the clip factor as
its own statement."""

from __future__ import annotations

import pytest
from conftest import ROOT

from workbench import autotune
from workbench.errors import IllegalTransform
from workbench.interpreter import assert_equivalent
from workbench.loader import load
from workbench.transforms import Fuse, Reorder, Split


def _user(name):
    return load(str(ROOT / "tests/programs/users" / name))


def test_reorder_names_the_hidden_statistics_it_would_leave_behind():
    p = Split("summed").apply(_user("tp_attn_out_layernorm.py").program)
    with pytest.raises(IllegalTransform, match=r"^reorder\(h, out, before=summed\): out reads "
                       r"t0, t1, computed from the gathered value after it and not moved \(the "
                       r"gather would stay for them\); name them too: reorder\(h, t0, t1, out, "
                       r"before=summed\)$"):
        Reorder(("h", "out"), "summed").apply(p)
    assert Reorder(("h", "t0", "t1", "out"), "summed").check(p).ok


def test_a_scalar_clip_factor_stays_replicated_and_keeps_its_name():
    pf = _user("clipped_adam.py")
    p = Split("g1").apply(pf.program)
    r = Reorder(("norm", "clip", "m1", "v1", "w1"), "g1")
    after = r.apply(p)
    assert r.results(p, after) == ("norm", "clip", "m1_s", "v1_s", "w1_s")
    clip = after.stmt_defining("clip")
    assert clip.out.type.rank == 0 and str(clip.out.type.layout) == "Replicated"
    assert_equivalent(pf.program, after, {"N": 16, "P": 4})


def test_fuse_inlines_a_scalar_that_only_the_fused_statements_read():
    pf = _user("clipped_adam.py")
    fused = pf.schedules["fuse-rs-c-ag"].apply()
    (region,) = [s for s in fused.stmts if type(s.op).__name__ == "Fused"]
    names = [leaf.out.name for leaf in region.leaves()]
    assert "clip" not in names and "norm" in names
    assert "min(1, c / (norm + 1e-06))" in str(region.op.body[2].op)
    assert_equivalent(pf.program, fused, {"N": 16, "P": 4})


def test_the_autotuner_finds_the_fused_clipped_adam():
    pf = _user("clipped_adam.py")
    found = autotune.search(pf.program)
    named = autotune.label_named(found, pf.schedules)
    assert "fuse-rs-c-ag" in named.values()


def test_a_fuse_the_verifier_would_reject_is_refused_naming_the_statement():
    pf = _user("tp_attn_out_layernorm.py")
    p = Split("summed").apply(pf.program)
    p = Reorder(("h", "t0", "t1", "out"), "summed").apply(p)
    # the gathers read the sliced values; fusing them without what they gather is refused
    with pytest.raises(IllegalTransform, match=r"fuse\(summed_rs, h_s, t1_s, out_s, h, out\): "):
        Fuse(("summed_rs", "h_s", "t1_s", "out_s", "h", "out")).apply(p)


def test_mean_without_an_axis_is_the_whole_tensor_mean_across_ranks():
    import numpy as np

    from workbench import Compute, Mean, P, Program, Size, Sliced, Tensor, float32
    from workbench.interpreter import random_inputs, run

    N = Size("N", multiple_of=P)
    x = Tensor(float32, [N], Sliced(0), "x")
    m = Compute(Mean(x) + 0.0, name="m")
    program = Program(inputs=[x], outputs=[m], name="mean")
    sizes = {"N": 12, "P": 3}
    inputs = random_inputs(program, sizes)
    assert np.allclose(run(program, inputs, sizes)["m"], inputs["x"].mean(), rtol=1e-6)


def test_a_size_that_must_divide_is_padded_up_not_rounded_down():
    from workbench import AllReduce, Local, P, Program, Size, Sum, Tensor, float32
    from workbench.errors import SizeError
    from workbench.interpreter import bind_sizes

    V = Size("V", multiple_of=P)
    g = Tensor(float32, [V], Local, "g")
    program = Program(inputs=[g], outputs=[AllReduce(Sum, g)], name="vocab")
    with pytest.raises(SizeError, match=r"got 50257; pad it to V = 50260$"):
        bind_sizes(program, {"V": 50257, "P": 4})


def test_no_hierarchical_split_for_a_group_inside_one_node():
    from workbench.placement import Placement
    from workbench.transforms import HierarchicalSplit

    program = load(str(ROOT / "studies/sgd.py")).program
    inside = Placement.of("dgx-h100*4", 4, 8, {"P": 8, "N": 2**20})
    across = Placement.of("dgx-h100*4", 4, 8, {"P": 32, "N": 2**20})
    kinds = [{type(m) for m in autotune.candidate_moves(program, p)} for p in (inside, across)]
    assert HierarchicalSplit not in kinds[0] and HierarchicalSplit in kinds[1]


def test_an_illegal_named_schedule_does_not_hide_the_candidates():
    from workbench import schedule

    pf = load(str(ROOT / "studies/sgd.py"))

    @schedule(pf.program)
    def broken(s):
        s.fuse("no_such_value", "w1")

    found = autotune.search(pf.program, max_depth=2)
    labels = autotune.label_named(found, {**pf.schedules, "broken": broken})
    assert "rs-c-ag" in labels.values() and "broken" not in labels.values()
