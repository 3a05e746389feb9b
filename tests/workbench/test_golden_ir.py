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
