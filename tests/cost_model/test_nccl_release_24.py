"""`nccl.release` "2.4" (design note 76): NCCL 2.4.8's fixed thresholds, no LL128, its Simple
tree as a pipeline of chunk steps; the baseline of CoCoNet's 128-GPU experiment (PyTorch's
bundled NCCL of 2020) against the AllReduce times derived from CoCoNet's raw data; bad input."""

import dataclasses
import json

import pandas as pd
import pytest

from cost_model import collectives as coll
from cost_model import nccl_model
from cost_model.hardware import load_hardware, preset
from workbench.cli.main import main
from workbench.errors import HardwareError

BASELINE = "records/coconet-128gpu/baseline_pytorch16.json"


def _v24(name: str, nodes: int):
    cluster = preset(name, nodes)
    return dataclasses.replace(cluster, nccl=dataclasses.replace(cluster.nccl, release="2.4"))


def test_tree_threshold_as_nccl_248_computes_it():
    """init.cc ncclTreeThreshold on 8 DGX-2 nodes: 3 x 5000 x 16 B/us x (6 x 127 - (15 x 3 +
    4 x 15)) us = 157.68 MB with 16 channels; no tree on one node, nor where the ring's
    latency is not above the tree's (8 ranks, one per node)."""
    assert nccl_model.v24_tree_threshold(128, 8, 16) == pytest.approx(157.68e6)
    assert nccl_model.v24_tree_threshold(16, 1, 16) == 0
    assert nccl_model.v24_tree_threshold(8, 8, 16) == 0


@pytest.mark.parametrize("elements, choice", [
    (2**16, ("tree", "LL")), (2**19, ("tree", "LL")),        # up to 2 MiB: 16 x 256 x 512 B
    (2**20, ("tree", "Simple")), (2**25, ("tree", "Simple")),  # up to the tree threshold
    (2**26, ("ring", "Simple")), (2**30, ("ring", "Simple")),
])
def test_choice_on_128_v100(elements, choice):
    """The measured baseline's time per byte jumps where NCCL 2.4.8 moves from the tree to
    the ring (between 2^25 and 2^26 floats), which its threshold gives only with 16
    channels (8 would put it at 78.8 MB, below 2^25 floats)."""
    assert nccl_model.v24_choice("allreduce", 4 * elements, 128, 8) == choice
    plan = coll.choose_plan("allreduce", 4 * elements, 128, _v24("dgx2-v100", 8))
    assert (plan.algorithm, plan.protocol) == choice


def test_other_kinds_run_the_ring_and_no_ll128():
    cluster = _v24("dgx2-v100", 8)
    for kind in ("reducescatter", "allgather"):
        for nbytes in (2**12, 2**24, 2**32):
            plan = coll.choose_plan(kind, nbytes, 128, cluster)
            assert plan.algorithm == "ring" and plan.protocol != "LL128"
    assert all(p.protocol != "LL128" for p in coll.plans("allreduce", 2**26, 16, cluster, 16))


def test_tree_chunks_follow_enqueue_cc():
    """512 KiB halved to 128 KiB while a channel has < 8 x depth chunks, to 64 KiB below
    4 x depth, to 32 KiB below depth (depth 19 on 8 x 16 ranks)."""
    assert nccl_model.v24_tree_chunk_bytes(4 * 2**22, 128, 8, 16) == 32768
    assert nccl_model.v24_tree_chunk_bytes(4 * 2**23, 128, 8, 16) == 65536
    assert nccl_model.v24_tree_chunk_bytes(4 * 2**30, 128, 8, 16) == 524288
    steps, chunk, step_s = nccl_model.v24_tree_simple(4 * 2**25, 128, 8, 16, 40e9)
    assert (steps, chunk) == (128 + 36, 65536)
    assert step_s == pytest.approx(65536 / (0.75 * 40e9 / 16))


def test_default_release_is_unchanged():
    """The default stays NCCL 2.28.9's least-time choice (LL128 tree at mid sizes here)."""
    plan = coll.choose_plan("allreduce", 4 * 2**22, 128, preset("dgx2-v100", 8))
    assert preset("dgx2-v100").nccl.release == "2.28"
    assert (plan.algorithm, plan.protocol) == ("tree", "LL128")


def test_baseline_allreduce_against_coconets_raw_data():
    """CoCoNet's baseline AllReduce on 128 V100 (the raw file's FusedAdam total less its
    optimizer time, per iteration), priced with the baseline profile: within 26 % at every
    size from 2^18 (the 2.28 release was 24-55 % fast at 2^20-2^25)."""
    measured = {18: 0.308, 19: 0.459, 20: 0.662, 21: 0.919, 22: 1.415, 23: 1.823, 24: 3.123,
                25: 5.574, 26: 7.481, 27: 13.34, 28: 26.44, 29: 53.10, 30: 103.1}
    cluster = load_hardware(BASELINE, 8)
    errors = {e: coll.collective_time("allreduce", 4 * 2**e, 128, cluster) * 1e3 / ms - 1
              for e, ms in measured.items()}
    assert max(abs(x) for x in errors.values()) < 0.26
    assert pd.Series(errors).abs().median() < 0.10


@pytest.mark.parametrize("profile, message", [
    ({"base": "dgx2-v100", "nccl": {"release": "2.7"}},
     "nccl.release must be one of 2.28, 2.6, 2.4, got '2.7'; 2.28 is NCCL 2.28.9's tuning "
     "model, 2.6 NCCL 2.6.4's (CoCoNet's kernels), 2.4 NCCL 2.4.8's thresholds (no LL128, no "
     "tuning model)"),
    ({"base": "dgx-a100", "nccl": {"release": "2.4"}},
     "nccl.release must be 2.28 for GPU A100 (compute capability 80): NCCL 2.4.8 predates "
     "Ampere, got release '2.4'; drop nccl.release from the profile"),
    ({"base": "dgx2-v100", "nccl": {"release": 2.4}},
     "hardware profile {path} field nccl.release must be a string (quote it in the profile), "
     "got a number; fix the profile"),
    ({"base": "dgx-h100", "nccl": {"release": "2.6"}},
     "nccl.release must be 2.28 for GPU H100 (compute capability 90): NCCL 2.6.4 predates "
     "Ampere, got release '2.6'; drop nccl.release from the profile"),
    ({"base": "dgx2-v100", "nccl": {"release": "2.6.4"}},
     "nccl.release must be one of 2.28, 2.6, 2.4, got '2.6.4'; 2.28 is NCCL 2.28.9's tuning "
     "model, 2.6 NCCL 2.6.4's (CoCoNet's kernels), 2.4 NCCL 2.4.8's thresholds (no LL128, no "
     "tuning model)"),
])
def test_bad_release_exits_2_with_one_message(tmp_path, capsys, profile, message):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(profile))
    with pytest.raises(HardwareError) as e:
        load_hardware(str(p))
    message = message.replace("{path}", str(p))  # the schema's messages name the file
    assert str(e.value) == message
    assert main(["simulate", "studies/sgd.py", "--hardware", str(p)]) == 2
    assert message in capsys.readouterr().err


def test_coconet_experiment_prices_the_baseline_on_its_release():
    """benchmarks/coconet_128gpu.py at two sizes: the baseline (ar-opt on NCCL 2.4.8) is
    slower than ar-opt on the cluster's NCCL where 2.4.8 has no LL128 (2^22), equal where
    both run the ring Simple (2^28), and the speedup over it is within 10 % of CoCoNet's."""
    import importlib.util
    from pathlib import Path

    from workbench.loader import load

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "coconet_128gpu.py"
    spec = importlib.util.spec_from_file_location("coconet_128gpu", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cluster = load_hardware(bench.HARDWARE, bench.NODES)
    baseline = load_hardware(str(bench.BASELINE), bench.NODES)
    loaded = load(str(bench.ROOT / "studies" / "adam.py"))
    ref = bench.measured().set_index("elements")
    for k in (22, 28):
        row = bench.simulate_size(loaded, cluster, baseline, k)
        if k == 22:
            # decision 116: the LL128 tree's store-and-forward across nodes makes ar-opt
            # slower there (0.817 -> 1.120 ms) and the best schedule's time meets CoCoNet's
            # measured 0.892 ms (0.909, was 0.817); the speedup (-17.7 %, was -8.4 %) now
            # carries the baseline's own error (NCCL 2.4.8's tree priced 1.326 against 1.580)
            assert row["baseline_ms"] > 1.15 * row["ar_opt_ms"]
            assert abs(row["best_ms"] / (ref.loc[2**k, "coconet_ms"] / 1e3) - 1) <= 0.05, row
            assert abs(row["speedup"] / ref.loc[2**k, "speedup"] - 1) <= 0.20, row
        else:
            assert row["baseline_ms"] == pytest.approx(row["ar_opt_ms"])
            assert abs(row["speedup"] / ref.loc[2**k, "speedup"] - 1) <= 0.10, row
