"""CUDA_VISIBLE_DEVICES narrows the GPUs a job may use: two jobs can share one machine, each
on its own devices, and `--gpus` is checked against what the process can see."""

import pytest

from workbench.runtime.job import visible_of


@pytest.mark.parametrize("visible, expected", [
    (None, 4), ("0,1", 2), ("2,3", 2), ("3", 1), ("", 0), ("0,1,-1,2", 2),
    ("GPU-5f1c, GPU-77aa", 2), ("0,1,2,3,4,5", 4),
])
def test_visible_devices_narrow_the_count(visible, expected):
    assert visible_of(4, visible) == expected
