"""The printed IR of every study, and of each of its named schedules, is pinned."""

import pytest
from conftest import STUDY_SPECS, assert_golden


@pytest.mark.parametrize("spec", STUDY_SPECS)
def test_study_ir_is_golden(study, spec):
    loaded = study(spec)
    parts = [str(loaded.program)]
    for name, sched in loaded.schedules.items():
        parts.append(f"# schedule {name}\n{sched.apply()}")
    assert_golden(f"ir/{spec.replace('studies/', '').replace('.py', '').replace(':', '-')}.txt",
                  "\n\n".join(parts) + "\n")


# Issue 15's programs (not studies of CoCoNet's figures: the autotuner's search is not pinned
# for them): the parameter server and its fused schedules, and the GPU run's programs.
EXTRA_SPECS = ["studies/parameter_server.py", "benchmarks/gpu/ops15.py",
               "benchmarks/gpu/ops15.py:epilogue_bf16", "benchmarks/gpu/ops15.py:mlp",
               "benchmarks/gpu/ops15.py:reductions", "benchmarks/gpu/ops15.py:broadcast",
               "benchmarks/gpu/adagrad.py", "benchmarks/gpu/sgd_momentum.py:sgd_momentum_wd"]


@pytest.mark.parametrize("spec", EXTRA_SPECS)
def test_issue15_ir_is_golden(study, spec):
    loaded = study(spec)
    parts = [str(loaded.program)]
    for name, sched in loaded.schedules.items():
        parts.append(f"# schedule {name}\n{sched.apply()}")
    stem = spec.split("/")[-1].replace(".py", "").replace(":", "-")
    assert_golden(f"ir/{stem}.txt", "\n\n".join(parts) + "\n")
