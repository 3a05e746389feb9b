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


# Programs beyond CoCoNet's figures (the autotuner's search is not pinned
# for them): the parameter server and its fused schedules, and the GPU run's programs.
EXTRA_SPECS = ["studies/parameter_server.py", "studies/kernel_ops.py",
               "studies/kernel_ops.py:epilogue_bf16", "studies/kernel_ops.py:mlp",
               "studies/kernel_ops.py:reductions", "studies/kernel_ops.py:broadcast",
               "studies/adagrad.py", "studies/sgd_momentum.py:sgd_momentum_wd",
               # issue 24: the MoE's overlaps and fused exchanges, computation fused before a
               # ReduceScatter, a product in a fused collective
               "studies/moe.py", "tests/programs/users/moe_scaled_dispatch.py",
               "tests/programs/users/grad_accum_bf16.py", "tests/programs/users/prod_scale.py"]


@pytest.mark.parametrize("spec", EXTRA_SPECS)
def test_more_programs_ir_is_golden(study, spec):
    loaded = study(spec)
    parts = [str(loaded.program)]
    for name, sched in loaded.schedules.items():
        parts.append(f"# schedule {name}\n{sched.apply()}")
    stem = spec.split("/")[-1].replace(".py", "").replace(":", "-")
    assert_golden(f"ir/{stem}.txt", "\n\n".join(parts) + "\n")
