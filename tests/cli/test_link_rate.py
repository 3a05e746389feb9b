"""--link-rate: the rate x_floor divides by, given or read from a P-peer link probe of the same
P (issue 35 item 3); bad values are one message naming the value and the fix."""

import json

import pytest
from conftest import load_study

from workbench.cli.results_table import NOMINAL_LINK, LinkRate, link_rate, table
from workbench.errors import WorkbenchError
from workbench.runtime.worker import comm_bytes


def _probe(tmp_path, P=4, gbps=361.5):
    path = tmp_path / "link.json"
    path.write_text(json.dumps({"P": P, "practical_GBps": gbps,
                                "practical_by": "sm stores to all peers", "rows": []}))
    return str(path)


def test_the_floor_is_the_bytes_at_the_probed_rate(tmp_path):
    link = link_rate(_probe(tmp_path), 4)
    assert link.Bps == pytest.approx(361.5e9) and "P = 4" in link.source
    pf = load_study("studies/adam.py")
    sizes = {"N": 2**28, "P": 4}
    rec = {"spec": "studies/adam.py", "program": "adam", "sizes": sizes, "P": 4,
           "schedule": "fuse-rs-c-ag", "kind": "workbench", "median_ms": 6.0, "p10_ms": 6.0,
           "p90_ms": 6.0, "comm_bytes": comm_bytes(pf.program, sizes, 4)}
    nominal, probed = table([rec]), table([rec], link)
    assert probed.x_floor[0] == pytest.approx(nominal.x_floor[0] * 361.5 / 478)
    assert probed.link_GBps[0] == pytest.approx(361.5)
    assert link_rate(None, 4) == NOMINAL_LINK
    assert link_rate("400", 8) == LinkRate(400e9, "given, 400 GB/s")


@pytest.mark.parametrize("value,says", [
    ("-3", "must be a rate in GB/s"),
    ("nan", "must be a rate in GB/s"),
    ("missing.json", "must be a number (GB/s) or a link probe JSON"),
])
def test_bad_rates_are_named(value, says, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(WorkbenchError, match=says.replace("(", r"\(").replace(")", r"\)")):
        link_rate(value, 4)


def test_a_probe_of_another_P_is_refused_with_the_fix(tmp_path):
    with pytest.raises(WorkbenchError, match=r"measured at P = 2, this run has --gpus 4; run "
                                             r"`python3 benchmarks/gpu/link_probe_peers.py "
                                             r"FILE 4`"):
        link_rate(_probe(tmp_path, P=2), 4)
    bad = tmp_path / "bad.json"
    bad.write_text("{\"P\": 4}")
    with pytest.raises(WorkbenchError,
                       match="field practical_GBps must be a finite rate in GB/s > 0, got nothing"):
        link_rate(str(bad), 4)


def test_a_P8_run_on_four_gpus_is_one_message_with_the_fix(tmp_path, monkeypatch, capsys):
    """--gpus above the GPUs present: exit 2, the limit and the fix (issue 35's bad input)."""
    import workbench.runtime.job as runtime_job
    from workbench.cli.main import main

    monkeypatch.setattr(runtime_job, "gpu_count", lambda: 4)
    code = main(["compile-and-measure", "studies/adam.py", "--gpus", "8", "--out",
                 str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert ("--gpus must not exceed the GPUs present, got --gpus 8 on a machine with 4; pass "
            "--gpus 4 or fewer, or run on a machine with 8 GPUs") in err
    assert "Traceback" not in err and err.count("\n") == 1
