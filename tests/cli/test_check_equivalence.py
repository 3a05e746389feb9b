"""`workbench check --equivalence` (issue 24 item 5): every named schedule and autotuner
candidate against the unscheduled program in the interpreter on P virtual ranks."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

from workbench.cli.main import main
from workbench.loader import load


def test_every_schedule_and_candidate_of_a_study_matches(capsys):
    assert main(["check", str(ROOT / "studies/adam.py"), "--equivalence", "--ranks", "2"]) == 0
    out = capsys.readouterr().out
    named = len(load(str(ROOT / "studies/adam.py")).schedules)  # ar-opt, fused, ring, ...
    assert named >= 3
    assert re.search(rf"equivalence: {named} named schedule\(s\) and \d+ autotuner candidate\(s\) "
                     r"match the unscheduled program in the interpreter on 2 virtual ranks at "
                     r"N=4, P=2", out), out


def test_a_schedule_that_changes_the_meaning_is_named_with_its_statement(capsys):
    code = main(["check", str(ROOT / "tests/programs/changes_meaning.py"), "--equivalence"])
    err = capsys.readouterr().err
    assert code == 2
    assert re.search(r"error: 1 of \d+ schedules and candidates must keep the program's "
                     r"meaning, got mismatches on 4 ranks at N=8, P=4:\n  schedule wrong: "
                     r"value 'g1' must match the unscheduled program within 1e-05, got max "
                     r"relative error [\d.e+-]+ at g1 = AllReduce\(Max, g\) "
                     r"\(changes_meaning.py:\d+\)", err), err
    assert "schedule right" not in err


@pytest.mark.parametrize("ranks", ["0", "1000000"])
def test_ranks_must_be_in_range(capsys, ranks):
    assert main(["check", str(ROOT / "studies/sgd.py"), "--equivalence", "--ranks", ranks]) == 2
    err = capsys.readouterr().err
    assert f"error: --ranks must be from 1 to 1024 (virtual ranks of the interpreter, each a " \
           f"copy of its values), got {ranks}; e.g. --ranks 4" in err
    # past the limit (not below 1) --force is offered
    assert ("or pass --force to run anyway" in err) == (ranks != "0")


def test_force_runs_past_the_rank_limit_and_zero_ranks_stay_refused(capsys):
    assert main(["check", str(ROOT / "studies/sgd.py"), "--equivalence", "--ranks", "1025",
                 "--force"]) == 0
    assert "on 1025 virtual ranks" in capsys.readouterr().out
    assert main(["check", str(ROOT / "studies/sgd.py"), "--equivalence", "--ranks", "0",
                 "--force"]) == 2


@pytest.mark.parametrize("args", [["--set", "N=2**28"], ["--set", "N=2**26", "--ranks", "8"]])
def test_equivalence_refuses_what_would_not_fit_in_memory(capsys, args):
    """--ranks 1000000 or --set N=2**62 ended in numpy memory errors (issue 40); sizes a GPU
    holds may still be past what the interpreter should hold."""
    code = main(["check", str(ROOT / "studies/sgd.py"), "--equivalence", *args])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "--equivalence must hold at most 268435456 elements in the interpreter" in err
    assert "lower --set or --ranks" in err


def test_check_says_which_schedules_the_cluster_cannot_run(capsys):
    code = main(["check", str(ROOT / "studies/adam.py"), "--hardware", "dgx-h100",
                 "--nodes", "4"])
    out, err = capsys.readouterr()
    assert code == 0
    named = len(load(str(ROOT / "studies/adam.py")).schedules)
    assert (f"program adam ok, {named - 1} schedules ok, 1 not runnable on dgx-h100*4 "
            "(simulate leaves it out); sizes N=268435456, P=32 ok on dgx-h100*4") in out
    assert "schedule fuse-rs-c-ag is not runnable on dgx-h100*4: a fused allreduce kernel" in err


def test_check_refuses_overlap_chunks_that_do_not_divide_the_rows(capsys):
    code = main(["check", str(ROOT / "studies/model_parallel.py"), "--set", "T=8196"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == ("error: schedule overlap-mm-fuse-ar-c at H=12288, P=4, T=8196: statement "
                   "y,summed_rs,out_s,out: the MatMul's 8196 output rows must be a multiple of "
                   "chunks x ranks = 16 to overlap in 4 chunks; pick sizes that divide, or a "
                   "chunk count that divides them\n")
