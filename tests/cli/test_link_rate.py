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
    with pytest.raises(WorkbenchError, match="must hold P, practical_GBps"):
        link_rate(str(bad), 4)
