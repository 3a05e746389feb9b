"""Options whose numbers are not numbers, or are out of any sensible range (issue 26): exit 2
with one message naming the option, what it must be and the fix; never a traceback, never a
run that takes hours or ends with NaN times."""

import pytest

from workbench.cli.main import main

FACTOR = "must be a finite number >= 1 and <= 1e+06"


@pytest.mark.parametrize("args, message", [
    (["--jitter", "inf"], "error: jitter (--jitter) must be a standard deviation >= 0 and <= "
                          "100, got inf; e.g. 0.02 for 2 % noise per kernel"),
    (["--jitter", "nan"], "error: jitter (--jitter) must be a standard deviation >= 0 and <= "
                          "100, got nan"),
    (["--slow", "0=inf"], f"error: slow (--slow) factor of rank 0 {FACTOR} (its computation "
                          "takes that many times its nominal time), got inf; use 1 for a "
                          "nominal rank"),
    (["--slow", "0=nan"], f"error: slow (--slow) factor of rank 0 {FACTOR}"),
    (["--degrade", "0=inf"], f"error: degraded (--degrade) factor of rank 0 {FACTOR} (its link "
                             "takes that many times its nominal time), got inf"),
    (["--straggler-rate", "0.5", "--straggler-slowdown", "inf"],
     "error: straggler_slowdown (--straggler-slowdown) must be a finite number >= 1 and <= "
     "1e+06 (a straggler computes that many times as slowly), got inf; e.g. 1.5"),
    (["--straggler-rate", "nan"], "error: straggler_rate (--straggler-rate) must be a "
                                  "probability in [0, 1], got nan"),
    (["--jitter", "0.1", "--seed", "-5"],
     "Invalid value for '--seed': -5 is not in the range 0<=x<=9223372036854775807."),
    (["--jitter", "0.1", "--samples", str(10**7)],
     "Invalid value for '--samples': 10000000 is not in the range 1<=x<=10000."),
    (["--samples", "0"], "Invalid value for '--samples': 0 is not in the range 1<=x<=10000."),
])
def test_simulate_variability_options(capsys, args, message):
    code = main(["simulate", "studies/sgd.py", *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["schedules", "studies/sgd.py", "--autotune", "--max-depth", "-1"],
     "Invalid value for '--max-depth': -1 is not in the range 1<=x<=64."),
    (["schedules", "studies/sgd.py", "--autotune", "--max-candidates", "-5"],
     "Invalid value for '--max-candidates': -5 is not in the range 1<=x<=100000."),
    (["sweep", "predict", "--gpus", "0", "--out", "unused-dir"],
     "Invalid value for '--gpus': 0 is not in the range 1<=x<=1000000."),
    (["compile-and-measure", "studies/sgd.py", "--gpus", "1", "--hang-timeout", "nan"],
     "Invalid value for '--hang-timeout': must be a finite number > 0 and <= 86400, got "
     "'nan'; e.g. --hang-timeout 60"),
    (["compile-and-measure", "studies/sgd.py", "--gpus", "1", "--hang-timeout", "0"],
     "Invalid value for '--hang-timeout': must be a finite number > 0 and <= 86400, got '0'"),
    (["compile-and-measure", "studies/sgd.py", "--gpus", "1", "--hang-timeout", "-1"],
     "Invalid value for '--hang-timeout': must be a finite number > 0"),
    (["calibrate", "--gpus", "1", "--hang-timeout", "inf"],
     "Invalid value for '--hang-timeout': must be a finite number > 0 and <= 86400, got 'inf'"),
    (["compile-and-measure", "studies/sgd.py", "--gpus", "1", "--warmup", "-3"],
     "Invalid value for '--warmup': -3 is not in the range 0<=x<=100000."),
])
def test_counts_and_timeouts(capsys, args, message):
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_variability_refuses_inf_in_the_library_too():
    from simulator import Variability
    from simulator.variability import VariabilityError

    for bad in (Variability(slow=((0, float("inf")),)), Variability(jitter=float("inf")),
                Variability(seed=-1), Variability(degraded=((0, float("nan")),))):
        with pytest.raises(VariabilityError):
            bad.check(4)


def test_a_full_simulation_of_hours_is_refused_before_it_starts(capsys):
    import time

    t0 = time.monotonic()
    code = main(["simulate", "studies/sgd.py", "--hardware", "dgx-h100", "--nodes", "65536",
                 "--full"])
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - t0 < 30
    assert ("error: a simulation of every rank must take at most 1 h, got an estimate of "
            "10.7 h (524288 GPUs x 2 statements x 3 schedules x 1 samples); use fewer --nodes "
            "or --samples, drop --full, or pass --force") in err


def test_the_estimate_passes_ordinary_runs(capsys):
    code = main(["simulate", "studies/sgd.py", "--hardware", "dgx-h100", "--nodes", "2",
                 "--full", "--jitter", "0.05", "--samples", "3"])
    assert code == 0, capsys.readouterr().err


@pytest.mark.parametrize("text, reason", [
    ("+".join(["1"] * 20_000), "(longer than 200 characters)"),
    ("(" * 99 + "1" + ")" * 99, ""),
    ("-" * 150 + "1", ""),
])
def test_huge_set_expressions_are_one_message(capsys, text, reason):
    code = main(["simulate", "studies/sgd.py", "--set", f"N={text}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and len(err) < 400, err
    assert reason in err
