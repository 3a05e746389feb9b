"""Peak memory per rank (cost_model.ops.peak_memory) and what simulate does with a schedule
that does not fit."""

import pytest
from click.testing import CliRunner

from cost_model.hardware import preset
from cost_model.ops import CostContext, peak_memory
from workbench.cli.simulate import simulate as simulate_cmd
from workbench.interpreter import bind_sizes
from workbench.loader import load

GIB = 2**30


def _memory(schedule, n=2**28, P=4):
    loaded = load("studies/adam.py")
    program = loaded.program if schedule is None else loaded.schedules[schedule].apply()
    return peak_memory(CostContext(program, preset("h200x4"), bind_sizes(program,
                                                                         {"N": n, "P": P})))


def test_adam_peak_memory_counts_inputs_values_and_nccl_buffers():
    m = _memory(None)
    # g, w, m, v: 4 x 1 GiB of f32 inputs; g1 (the reduced gradient) alive with the updates
    assert m.inputs_bytes == pytest.approx(4 * GIB, rel=1e-6)
    assert m.values_bytes == pytest.approx(1 * GIB, rel=1e-6)
    assert m.comm_buffers_bytes == 2 * 32 * 4 * 2**20  # 2 x channels x NCCL_BUFFSIZE
    assert m.fits and m.peak_bytes / GIB == pytest.approx(5.25, rel=1e-6)


def test_keeping_state_sliced_buys_memory():
    assert _memory("rs-c-ag-sliced-state").peak_bytes < 0.75 * _memory(None).peak_bytes


def test_a_schedule_that_does_not_fit_is_said_and_never_best():
    out = CliRunner().invoke(simulate_cmd, ["studies/adam.py", "--set", "N=2**62"])
    assert out.exit_code == 0, out.output
    assert "no schedule predicted (see the notes)" in out.output
    # the table cuts the note; the whole message is on stderr (CliRunner mixes the two)
    assert "m1_s,v1_s does not fit: peak memory per rank must fit" in out.output
    assert "left out on h200x4: peak memory per rank must fit the GPU's 131.3 GiB, got " \
        "8.59e+10 GiB" in out.output
    assert " * " not in out.output


def test_memory_column():
    out = CliRunner().invoke(simulate_cmd, ["studies/adam.py", "--memory"])
    assert out.exit_code == 0, out.output
    header = next(line for line in out.output.splitlines()
                  if line.split()[:2] == ["schedule", "time_ms"])
    header = header.split()
    assert header[header.index("mem_GiB"):][:2] == ["mem_GiB", "mem_use"]  # then any note
