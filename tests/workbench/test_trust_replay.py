"""Replay files are data (issue 26): whatever a candidates file holds (wrong-typed fields,
null, nested lists, a string where a list of names goes, deep nesting), `workbench schedules
--replay` replays it or exits 2 with one message, never a traceback; a string `values` is
never split into characters."""

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.autotune import load_candidates
from workbench.cli.main import main
from workbench.errors import ProgramFileError
from workbench.transforms import TRANSFORMS

JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats()
                    | st.text(max_size=8) | st.sampled_from(["g1", "w1", "ag", "rs"]),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)


def _replay(tmp_path, capsys, candidates) -> tuple[int, str]:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"program": "sgd", "candidates": candidates}))
    code = main(["schedules", "studies/sgd.py", "--replay", str(path)])
    return code, capsys.readouterr().err


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(TRANSFORMS)), fields=st.dictionaries(
    st.sampled_from(["values", "before", "tensors", "kind", "allreduce", "producer",
                     "consumer", "chunks", "region", "per_node", "other"]), JSON, max_size=3))
def test_any_transform_record_replays_or_is_one_message(tmp_path, capsys, name, fields):
    code, err = _replay(tmp_path, capsys, [{"name": "c", "transforms": [
        {"transform": name, **fields}]}])
    assert code in (0, 2) and "Traceback" not in err
    assert code == 0 or (err.startswith("error: ") and err.count("\n") == 1), err


@pytest.mark.parametrize("transform, message", [
    ({"transform": "reorder", "values": "w1", "before": "ag"},
     "transform reorder field values must be a list of names (strings), got 'w1'"),
    ({"transform": "split", "allreduce": None},
     "transform split field allreduce must be a name (a string), got None"),
    ({"transform": "overlap", "producer": "g1", "consumer": "w1", "chunks": "many"},
     "transform overlap field chunks must be an integer, got 'many'"),
    ({"transform": "fuse", "values": [["g1"]], "kind": None},
     "transform fuse field values must be a list of names (strings), got [['g1']]"),
    ({"transform": "split", "allreduce": 7}, "transform split field allreduce must be a name"),
])
def test_wrong_typed_fields(tmp_path, capsys, transform, message):
    code, err = _replay(tmp_path, capsys, [{"name": "c", "transforms": [transform]}])
    assert code == 2 and message in err


def test_deep_nesting_is_one_message(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    code = main(["schedules", "studies/sgd.py", "--replay", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and f"candidates file {path} must be JSON, got RecursionError" in err


def test_a_valid_record_replays(tmp_path, capsys):
    code, err = _replay(tmp_path, capsys, [{"name": "c", "transforms": [
        {"transform": "split", "allreduce": "g1"}]}])
    assert code == 0, err


def test_a_replay_file_that_is_a_fifo_or_huge_is_refused_before_reading(tmp_path):
    """The candidates file is read by the bounded reader (issue 40): a FIFO blocked the read
    forever, a huge file was parsed whole."""
    fifo = tmp_path / "c.json"
    os.mkfifo(fifo)
    with pytest.raises(ProgramFileError, match=f"candidates file {fifo} must be a regular file, "
                       "got a FIFO; write one with"):
        load_candidates(fifo)
    huge = tmp_path / "h.json"
    huge.write_text("{}")
    os.truncate(huge, 100 << 20)
    with pytest.raises(ProgramFileError, match=f"candidates file {huge} must be at most 67108864 "
                       "bytes, got 104857600"):
        load_candidates(huge)
