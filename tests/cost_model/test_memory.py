"""Peak memory per rank: what a schedule's plan allocates (cost_model.plan_memory; decision
104: the IR's liveness bound went), and what simulate does with a schedule that does not
fit."""

import pytest
from click.testing import CliRunner

from codegen.lower import lower
from cost_model.hardware import preset
from cost_model.plan_memory import plan_memory
from workbench.cli.simulate import simulate as simulate_cmd
from workbench.interpreter import bind_sizes
from workbench.loader import load

GIB = 2**30


def _memory(schedule, n=2**28, P=4):
    loaded = load("studies/adam.py")
    program = loaded.program if schedule is None else loaded.schedules[schedule].apply()
    return plan_memory(lower(program, P, priced_only=True), preset("h200x4"),
                       bind_sizes(program, {"N": n, "P": P}))


def test_adam_peak_memory_counts_inputs_values_and_nccl_buffers():
    m = _memory(None)
    # g, w, m, v: 4 x 1 GiB of f32 inputs (and lr); g reduced in place, the updates in their
    # targets: no other value
    assert m.inputs_bytes == pytest.approx(4 * GIB, rel=1e-6)
    assert m.values_bytes == 0
    assert m.comm_buffers_bytes == 2 * 32 * 4 * 2**20  # 2 x channels x NCCL_BUFFSIZE
    assert m.fits and m.peak_bytes / GIB == pytest.approx(4.25, rel=1e-6)


def test_keeping_state_sliced_buys_memory():
    assert _memory("rs-c-ag-sliced-state").peak_bytes < 0.75 * _memory(None).peak_bytes


def test_the_ring_fused_form_holds_what_its_plan_allocates():
    # priced only, never run: its plan's buffers are the peers form's (no NCCL staging)
    ring = _memory("fuse-rs-c-ag-ring")
    assert ring.comm_buffers_bytes == 0 and ring.fits
    assert ring.peak_bytes == pytest.approx(_memory("fuse-rs-c-ag").peak_bytes, rel=1e-9)


def test_a_schedule_that_does_not_fit_is_said_and_never_best():
    out = CliRunner().invoke(simulate_cmd, ["studies/adam.py", "--set", "N=2**62"])
    assert out.exit_code == 0, out.output
    assert "no schedule predicted (see the notes)" in out.output
    # the table cuts the note; the whole message is on stderr (CliRunner mixes the two)
    assert "m1_s,v1_s does not fit: peak memory per rank must fit" in out.output
    # the unscheduled plan: its four inputs (g reduced in place, the updates in their targets)
    assert "left out on h200x4: peak memory per rank must fit the GPU's 131.3 GiB, got " \
        "6.872e+10 GiB" in out.output
    assert " * " not in out.output


def test_a_generated_schedule_holds_what_its_plan_allocates():
    loaded = load("studies/adam.py")
    got = {}
    for name in ("rs-c-ag", "rs-c-ag-sliced-state", "fuse-rs-c-ag"):
        program = loaded.schedules[name].apply()
        bound = bind_sizes(program, {"N": 2**28, "P": 4})
        got[name] = plan_memory(lower(program, 4), preset("h200x4"), bound)
    # rs-c-ag: g, w, m, v (4 GiB) and the reduce-scattered slice g1_rs (0.25 GiB: the updates
    # write their targets, the AllGather gathers in place), plus NCCL's buffers (the IR's
    # liveness bound counted 7.25 GiB)
    m = got["rs-c-ag"]
    assert m.inputs_bytes == pytest.approx(4 * GIB, rel=1e-6)
    assert m.comm_buffers_bytes == 2 * 32 * 4 * 2**20
    assert m.peak_bytes / GIB == pytest.approx(4.5, rel=1e-6)
    assert got["rs-c-ag-sliced-state"].peak_bytes / GIB == pytest.approx(3.0, rel=1e-6)
    fused = got["fuse-rs-c-ag"]  # one kernel, no NCCL: its flags beside the inputs
    assert fused.comm_buffers_bytes == 0 and 2.5 < fused.peak_bytes / GIB < 2.5001


def test_memory_column():
    out = CliRunner().invoke(simulate_cmd, ["studies/adam.py", "--memory"])
    assert out.exit_code == 0, out.output
    header = next(line for line in out.output.splitlines()
                  if line.split()[:2] == ["schedule", "time_ms"])
    header = header.split()
    assert header[header.index("mem_GiB"):][:2] == ["mem_GiB", "mem_use"]  # then any note
