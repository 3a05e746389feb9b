"""The autotuner finds CoCoNet's schedules, deduplicates, bounds its search, and replays."""

import json

import pytest
from conftest import STUDY_SPECS, assert_golden, load_study

from workbench import autotune as at
from workbench.errors import ProgramFileError
from workbench.interpreter import assert_equivalent


@pytest.mark.parametrize("spec", STUDY_SPECS)
def test_finds_every_named_schedule(spec):
    f = load_study(spec)
    result = at.search(f.program)
    assert not result.truncated
    found = set(at.label_named(result, f.schedules).values())
    # the ring-fused form is simulated only (never generated): not a move the search makes
    named = set(f.schedules) - {"fuse-rs-c-ag-ring"}
    assert found == named, f"autotuner missed {named - found}"


@pytest.mark.parametrize("spec", STUDY_SPECS)
def test_candidates_are_distinct_and_equivalent(spec):
    f = load_study(spec)
    result = at.search(f.program)
    irs = [str(c.program) for c in result.candidates]
    assert len(irs) == len(set(irs))
    for cand in result.candidates:
        assert_equivalent(f.program, cand.program, {"N": 6, "H": 6, "T": 3, "P": 3}, seed=1)


def test_schedule_lists_are_golden():
    lines = []
    for spec in STUDY_SPECS:
        f = load_study(spec)
        result = at.search(f.program)
        named = at.label_named(result, f.schedules)
        lines.append(f"{spec}: named {sorted(f.schedules)}")
        for c in result.candidates:
            lines.append(f"  {c.name}" + (f" = {named[c.name]}" if c.name in named else ""))
    assert_golden("schedules.txt", "\n".join(lines) + "\n")


def test_bound_is_reported():
    f = load_study("studies/adam.py:mixed")
    result = at.search(f.program, max_candidates=5)
    assert result.truncated and len(result.candidates) == 5


def test_json_replay(tmp_path):
    f = load_study("studies/lamb.py")
    result = at.search(f.program)
    path = tmp_path / "cands.json"
    at.save(result, f.program, path)
    record = at.load_candidates(path)
    for cand, saved in zip(result.candidates, record["candidates"]):
        assert at.replay(f.program, saved) == cand.program
    path.write_text(json.dumps({"nope": 1}))
    with pytest.raises(ProgramFileError, match="must be a JSON record with a 'candidates' list"):
        at.load_candidates(path)


def test_every_rooted_fusion_is_proposed():
    """The parameter server: fusing the update into the Reduce, into the Broadcast, or both
    are three kernels of different costs (design note 48), so the autotuner proposes each, not
    only the longest window; every candidate computes what the program does."""
    f = load_study("studies/parameter_server.py")
    result = at.search(f.program)
    assert not result.truncated
    named = at.label_named(result, f.schedules)
    assert set(named.values()) == {"fuse-reduce-c", "fuse-c-broadcast",
                                   "fuse-reduce-c-broadcast"}
    assert len(result.candidates) == 4  # and the unscheduled program
    for cand in result.candidates:
        for P_ in (1, 3):
            assert_equivalent(f.program, cand.program, {"N": 2 * P_, "P": P_}, seed=P_)
