"""The codegen options (workbench.options.CodegenOptions): one frozen record of every knob,
validated where it is made, read from the environment only at the edge, carried by the plan,
and what wbtorch's predicted choice lowers with."""

import math

import pytest
from conftest import ROOT

from codegen.lower import lower
from workbench.errors import RuntimeFault, WorkbenchError
from workbench.loader import load
from workbench.options import PRICED, CodegenOptions


def test_defaults_and_what_the_plan_carries():
    opts = CodegenOptions()
    assert opts.changed() == {} and set(PRICED) == set(opts.as_dict())
    program = load(str(ROOT / "studies/adam.py")).schedules["fuse-rs-c-ag"].apply()
    assert lower(program, 4).options == opts
    push = CodegenOptions(collective_mode="push", collective_blocks_per_sm=1)
    plan = lower(program, 4, push)
    assert plan.options == push and plan.kernels()[0].pushes  # push: phase one's peer stores
    # the keyword arguments of before still lower the same plan
    assert lower(program, 4, collective_mode="push").kernels() == lower(
        program, 4, CodegenOptions(collective_mode="push")).kernels()


@pytest.mark.parametrize("fields, message", [
    ({"collective_mode": "scatter"}, r"codegen option collective_mode must be one of "
                                     r"\('pull', 'push'\), got 'scatter'; pull is the default"),
    ({"unroll": 3}, r"codegen option unroll must be one of \(1, 2, 4\), got 3"),
    ({"row_prefetch": 1}, r"codegen option row_prefetch must be 0 or 1"),
    ({"collective_blocks_per_sm": 4}, r"collective_blocks_per_sm must be one of \(1, 2\) \(a "
                                      r"fused collective's grid per SM\), got 4; more than 2"),
    ({"overlap_blocks": -1}, r"overlap_blocks must be a whole number >= 0"),
    ({"collective_grid": -4}, r"collective_grid must be a whole number >= 0 \(a fused "
                              r"collective's grid in blocks at most"),
    ({"collective_grid": 2.5}, r"collective_grid must be a whole number >= 0"),
])
def test_bad_values_are_refused_where_the_options_are_made(fields, message):
    with pytest.raises(WorkbenchError, match=message):
        CodegenOptions(**fields)


def test_a_bad_legacy_keyword_is_a_lowering_refusal():
    program = load(str(ROOT / "studies/adam.py")).program
    with pytest.raises(RuntimeFault, match="codegen option unroll must be one of"):
        lower(program, 4, collective_unroll=3)


def test_the_environment_and_settings_are_read_at_the_edge():
    env = {"WB_ROW_PREFETCH": "1", "WB_OVERLAP_BLOCKS": "66",
           "WB_COLLECTIVE_BLOCKS_PER_SM": "1", "WB_ROW_MIN_BLOCKS": ""}
    opts = CodegenOptions.from_env(env, unroll=2)
    assert opts.changed() == {"unroll": 2, "row_prefetch": True, "collective_blocks_per_sm": 1,
                              "overlap_blocks": 66}
    assert CodegenOptions.from_env({"WB_COLLECTIVE_GRID": "32"}).changed() == {
        "collective_grid": 32}
    assert opts.with_settings(["row-min-blocks=3", "cache=stream"]).changed() == {
        **opts.changed(), "row_min_blocks": 3, "cache": "stream"}
    with pytest.raises(WorkbenchError, match=r"--codegen row_min_blocks must be one of "
                                             r"\(1, 2, 3, 4\) .*got 9"):
        opts.with_settings(["row_min_blocks=9"])
    with pytest.raises(WorkbenchError, match=r"WB_COLLECTIVE_BLOCKS_PER_SM must be one of "
                                             r"\(1, 2\)"):
        CodegenOptions.from_env({"WB_COLLECTIVE_BLOCKS_PER_SM": "8"})


def test_wbtorch_never_predicts_a_candidate_codegen_refuses(monkeypatch):
    # The simulator does not tell push from pull; a candidate whose lowering refuses its
    # options is NaN (never picked), while the same schedule in the other mode keeps its time.
    import codegen.lower as lowering
    from cost_model.hardware import load_hardware
    from wbtorch import choice as ch

    real = lowering.lower

    def refuse_push(program, P, options=None, **kw):
        if options is not None and options.collective_mode == "push":
            raise RuntimeFault("not generated in push mode (test)")
        return real(program, P, options, **kw)

    monkeypatch.setattr(lowering, "lower", refuse_push)
    loaded = load(str(ROOT / "studies/adam.py"))
    cands = [ch.Candidate("fuse-rs-c-ag", "pull"), ch.Candidate("fuse-rs-c-ag", "push")]
    times = ch.predict(loaded, cands, 2**20, 4, load_hardware("h200x4"))
    assert times[cands[0]] > 0 and math.isnan(times[cands[1]])
    assert ch.best(times) == cands[0]


def test_a_fused_collectives_grid_is_capped_by_collective_grid():
    """collective_grid (design note 94): at most that many blocks (the kernel strides over
    the rest), never more than blocks per SM x SMs; 0 is no cap."""
    from types import SimpleNamespace

    from workbench.runtime.executor import collective_grid

    spec = SimpleNamespace(row=None)
    assert collective_grid(spec, 2, 132) == 264
    assert collective_grid(spec, 2, 132, 32) == 32
    assert collective_grid(spec, 1, 132, 500) == 132
    row = SimpleNamespace(row=SimpleNamespace(grid_per_sm=3))
    assert collective_grid(row, 2, 132) == 396 and collective_grid(row, 2, 132, 16) == 16
