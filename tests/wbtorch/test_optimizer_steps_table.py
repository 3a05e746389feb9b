"""The issue-17 optimizer benchmark's tables (benchmarks/gpu/optimizer_steps.py) on made-up
rows, CPU only: each table picks the fastest generated and torch rows by its own timing (GPU
idle at the start, or device time alone), and a failed or untimed row is left out."""

from __future__ import annotations

from conftest import load_script


def _bench():
    return load_script("benchmarks/gpu/optimizer_steps.py")


def test_each_table_uses_its_own_timing(tmp_path):
    b = _bench()
    nan = float("nan")
    row = dict(case="adam", log2n=24)
    rows = [dict(row, variant="copy (HBM floor)", **b.times((0.168, 0.160, 6.0)), check=""),
            dict(row, variant="generated fuse-rs-c-ag (unroll 1, 2 blocks/SM)",
                 **b.times((0.220, 0.190, 15.0)), check="1.0e-07"),
            dict(row, variant="generated fuse-rs-c-ag (unroll 1, 1 blocks/SM)",
                 **b.times((nan, nan, nan)), check="failed: x"),
            # host issue makes fused the slower with the GPU idle, the faster on the device
            dict(row, variant="torch fused", **b.times((0.347, 0.180, 150.0)), check=""),
            dict(row, variant="torch compile", **b.times((0.329, 0.200, 60.0)), check="")]
    b.write(tmp_path, rows, "GPU", "2.x")
    text = (tmp_path / "optimizer_steps.md").read_text()
    idle, device = text.split("## The GPU busy")
    assert ("| adam | 2^24 | 0.220 (unroll 1, 2 blocks/SM) | 0.220 | 0.329 (compile) | 1.50x |"
            in idle)
    assert "| 0.168 | 1.31 | 15, 60 |" in idle
    assert ("| adam | 2^24 | 0.190 (unroll 1, 2 blocks/SM) | 0.190 | 0.180 (fused) | 0.95x |"
            in device)
    assert "| 0.160 | 1.19 | 15, 150 |" in device
    csv_text = (tmp_path / "optimizer_steps.csv").read_text()
    assert csv_text.splitlines()[0] == "case,log2n,variant,median_ms,device_ms,host_us,check"


def test_a_tuned_knob_shows_in_the_generated_column(tmp_path):
    """The knobs of design note 55 are parsed from --knobs/--tuned-knobs and named in the
    variant; the table's 'generated (knobs)' column shows the fastest variant's knobs, and the
    default knobs' column keeps the default's time."""
    b = _bench()
    assert b.parse_knob("1,2") == (1, 2, 16, "default")
    assert b.parse_knob("1,1,32,stream") == (1, 1, 32, "stream")
    assert b.knob_text(1, 2, 16, "default") == "unroll 1, 2 blocks/SM"
    assert b.knob_text(1, 1, 32, "stream") == "unroll 1, 1 blocks/SM, 32-byte vectors, stream hints"
    assert (1, 2, 32, "stream") in b.TUNED_KNOBS and (1, 2, 16, "default") in b.KNOBS
    row = dict(case="sgd", log2n=28)
    tuned = f"generated fuse-rs-c-ag ({b.knob_text(1, 2, 32, 'stream')})"
    rows = [dict(row, variant="copy (HBM floor)", **b.times((1.10, 1.068, 6.0)), check=""),
            dict(row, variant="generated fuse-rs-c-ag (unroll 1, 2 blocks/SM)",
                 **b.times((1.17, 1.126, 15.0)), check="0.0e+00"),
            dict(row, variant=tuned, **b.times((1.10, 1.060, 15.0)), check="0.0e+00"),
            dict(row, variant="torch compile", **b.times((1.24, 1.050, 200.0)), check="")]
    b.write(tmp_path, rows, "GPU", "2.x")
    device = (tmp_path / "optimizer_steps.md").read_text().split("## The GPU busy")[1]
    assert ("| sgd | 2^28 | 1.060 (unroll 1, 2 blocks/SM, 32-byte vectors, stream hints) | "
            "1.126 | 1.050 (compile) | 0.99x |" in device)


def test_a_malformed_knob_is_refused_with_the_format():
    import pytest

    with pytest.raises(SystemExit, match=r"a knob must be UNROLL,BLOCKS_PER_SM\[,VEC_BYTES"
                                         r"\[,CACHE\]\], got '1'"):
        _bench().parse_knob("1")


def test_a_knob_that_changes_no_kernel_is_recognised():
    """The sweep skips a variant whose kernels are a timed one's: mixed Adam's f32 operands
    already move 32 bytes, so 32-byte vectors leave its kernel as it is; f32 Adam's change."""
    b = _bench()
    mixed, adam = "studies/adam.py:mixed", "studies/adam.py"
    sched = "fuse-rs-c-ag"
    assert (b.kernel_names(mixed, sched, 1, 32, "default")
            == b.kernel_names(mixed, sched, 1, 16, "default"))
    assert (b.kernel_names(adam, sched, 1, 32, "default")
            != b.kernel_names(adam, sched, 1, 16, "default"))
    assert (b.kernel_names(mixed, sched, 1, 16, "stream")
            != b.kernel_names(mixed, sched, 1, 16, "default"))
