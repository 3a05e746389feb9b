"""What a user reads from the sweep and report commands (issue 24, item 7): progress on
stderr, the answer on stdout, tables and figures ordered by the sizes' numbers, predicted and
measured told apart, the profile a prediction was priced with named."""

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from studies.sweep import RMSNORM_SIZES, size_label, size_order, size_values
from workbench.cli.main import main
from workbench.cli.report import KIND_STYLE, figure, figure_layout


def _rmsnorm_tables(measured_too: bool = True):
    """A predicted table over the AllReduce + RMSNorm sizes (H x T) with three schedules,
    and a measured one over half of them; times grow with T*H so every order is known."""
    rows = []
    for sizes in RMSNORM_SIZES:
        for k, sched in enumerate(("unscheduled", "rs-c-ag", "fuse-rs-c-ag")):
            rows.append({"study": "allreduce_rmsnorm", "schedule": sched,
                         "size": size_label(sizes), "gpus": 4,
                         "predicted_s": sizes["T"] * sizes["H"] * 1e-12 * (3 - k)})
    predicted = pd.DataFrame(rows)
    measured = predicted.rename(columns={"predicted_s": "measured_s"})
    measured = measured[measured["size"].str.contains("T=2\\^(?:7|10)")].assign(
        measured_s=lambda d: d["measured_s"] * 1.1, check="ok")
    return predicted, measured if measured_too else None


def test_size_labels_sort_by_their_numbers_and_read_back():
    labels = [size_label(s) for s in RMSNORM_SIZES]
    assert sorted(labels) != labels  # as text, T=2^10 comes before T=2^2
    assert sorted(reversed(labels), key=size_order) == labels
    assert [size_values(label) for label in labels] == RMSNORM_SIZES


def test_report_prints_where_it_wrote_not_the_markdown_and_shows_progress(tmp_path, capsys):
    predicted, measured = _rmsnorm_tables()
    predicted.to_csv(tmp_path / "predicted.csv", index=False)
    measured.to_csv(tmp_path / "measured.csv", index=False)
    assert main(["report", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out == (f"wrote {tmp_path / 'report.md'} "
                   f"({len((tmp_path / 'report.md').read_text().splitlines())} lines) and 1 "
                   "figure (.png and .pdf): allreduce_rmsnorm.png\n")
    assert "report: drawing allreduce_rmsnorm (1/1)" in err


def test_report_tables_have_no_tuple_labels_and_follow_the_sizes_numbers(tmp_path):
    predicted, measured = _rmsnorm_tables()
    predicted.sample(frac=1, random_state=0).to_csv(tmp_path / "predicted.csv", index=False)
    measured.to_csv(tmp_path / "measured.csv", index=False)
    main(["report", str(tmp_path)])
    text = (tmp_path / "report.md").read_text()
    assert "('" not in text and "', 4)" not in text
    section = text.split("### allreduce_rmsnorm")[1].split("##")[0]
    header, _, *rows = [line for line in section.splitlines() if line.startswith("|")]
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "size", "gpus", "unscheduled", "fuse-rs-c-ag", "rs-c-ag"]
    assert [r.split("|")[1].strip() for r in rows] == [size_label(s) for s in RMSNORM_SIZES]
    joined = text.split("## Predicted vs measured")[1].split("##")[0]
    fused = [line.split("|")[3].strip() for line in joined.splitlines()
             if "| fuse-rs-c-ag " in line]
    assert fused == sorted(fused, key=size_order) and len(fused) == 6


def test_one_panel_per_hidden_size_tokens_on_a_log_axis():
    x, panels = figure_layout([size_label(s) for s in reversed(RMSNORM_SIZES)])
    assert x == "T" and panels == [{"H": 4096}, {"H": 8192}, {"H": 16384}]
    assert figure_layout(["N=2^20", "N=2^24"]) == ("N", [{}])
    # the model-parallel layer: H fixed, T varies: one panel
    assert figure_layout(["H=12288,T=2^10", "H=12288,T=2^11"]) == ("T", [{}])


def test_the_figure_tells_predicted_from_measured():
    predicted, measured = _rmsnorm_tables()
    fig = figure("allreduce_rmsnorm", predicted, measured)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["H=4096", "H=8192", "H=16384"]
    for ax in axes:
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        assert [t.get_text() for t in ax.get_xticklabels()] == ["4", "128", "1024", "8192"]
        lines = ax.get_lines()
        assert len(lines) == 6  # 3 schedules predicted, 3 measured
        markers = {(line.get_marker(), line.get_linestyle()) for line in lines}
        assert markers == {(KIND_STYLE[k]["marker"], KIND_STYLE[k]["linestyle"])
                           for k in KIND_STYLE}
        assert len({line.get_color() for line in lines}) == 3  # a colour per schedule
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    # each schedule once (not once per kind), then what the two line kinds mean
    assert legend == ["unscheduled", "fuse-rs-c-ag", "rs-c-ag", "measured", "predicted"]
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_sweep_predict_shows_progress_and_names_its_profile(tmp_path):
    from workbench.cli.sweep import main as sweep_main

    result = CliRunner().invoke(sweep_main, ["predict", "--study", "sgd", "--gpus", "2",
                                             "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "sweep predict on h200x4: sgd N=2^20 (1/5)" in result.stderr
    assert "sweep predict on h200x4: sgd N=2^28 (5/5)" in result.stderr
    assert result.stdout.startswith(f"wrote {tmp_path / 'predicted.csv'} (")
    assert ("priced with h200x4 (4 GPUs); the default --hardware, not a calibration: pass "
            "--hardware PROFILE.json (workbench calibrate) of the machine that measured"
            ) in result.stdout


@pytest.mark.parametrize("given", [False, True])
def test_sweep_steps_says_which_profile_it_priced_with(tmp_path, given):
    from workbench.cli.sweep import main as sweep_main

    rec = {"spec": "studies/adam.py:mixed", "program": "adam", "sizes": {"N": 2**24, "P": 2},
           "P": 2, "schedule": "unscheduled", "kind": "workbench", "median_ms": 0.2,
           "steps": [{"stage": 0, "stmts": "g1", "median_ms": 0.2, "spread_ms": 0.01}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"records": [rec]}))
    args = ["steps", str(path)] + (["--hardware", "h100x8"] if given else [])
    result = CliRunner().invoke(sweep_main, args)
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    if given:
        assert first == "priced with h100x8 (8 GPUs)"
    else:
        assert first.startswith("priced with h200x4 (4 GPUs); the default --hardware, not a "
                                "calibration")


def _simulate(capsys, *args):
    code = main(["simulate", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_simulate_names_the_sizes_it_ran_at(capsys, tmp_path):
    csv, js = tmp_path / "t.csv", tmp_path / "t.json"
    code, out, _ = _simulate(capsys, "studies/adam.py", "--set", "N=3*2**20", "--csv", str(csv),
                             "--json", str(js))
    assert code == 0
    assert out.splitlines()[0] == ("adam on h200x4 (4 GPUs) at N=3145728, P=4; simulated all "
                                   "4 ranks")
    table = pd.read_csv(csv)
    assert set(table["sizes"]) == {"N=3145728 P=4"} and set(table["hardware"]) == {"h200x4"}
    rows = json.loads(js.read_text())
    assert all(r["sizes"] == {"N": 3145728, "P": 4} and r["hardware"] == "h200x4"
               for r in rows)
    code, out, _ = _simulate(capsys, "studies/adam.py", "--hardware", "h100x8")
    assert out.splitlines()[0].startswith("adam on h100x8 (8 GPUs) at N=268435456 (2^28), P=8;")


@pytest.mark.parametrize("kind, factor", [("allreduce", 2 * 7 / 8), ("reducescatter", 7 / 8),
                                          ("allgather", 7 / 8), ("broadcast", 1.0),
                                          ("reduce", 1.0)])
def test_bus_factors_are_nccl_tests(kind, factor):
    from cost_model.collectives import bus_factor

    assert bus_factor(kind, 8) == pytest.approx(factor)


def test_explain_gives_algbw_and_busbw_as_nccl_tests_does(capsys):
    import re

    code, out, _ = _simulate(capsys, "studies/adam.py", "--explain")
    assert code == 0
    pattern = re.compile(r"  (\w+) = (\w+) over 4 ranks on 1 node\(s\): \w+/\w+, \w+-bound, "
                         r"([\d.]+) ms for 1 GiB, algbw ([\d.]+) GB/s, busbw ([\d.]+) GB/s")
    found = pattern.findall(out)
    assert {kind for _, kind, *_ in found} == {"allreduce", "reducescatter", "allgather"}
    for _, kind, ms, algbw, busbw in found:
        assert float(algbw) == pytest.approx(2**30 / (float(ms) * 1e-3) / 1e9, rel=1e-3)
        want = {"allreduce": 1.5, "reducescatter": 0.75, "allgather": 0.75}[kind]
        assert float(busbw) / float(algbw) == pytest.approx(want, rel=1e-3)


def _named(trace: dict) -> tuple[list[str], dict]:
    """The process names in sort order, and {(pid, tid): thread name}; every slice must sit
    on a named process and thread."""
    events = trace["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    order = {e["pid"]: e["args"]["sort_index"] for e in events
             if e["name"] == "process_sort_index"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["name"] == "thread_name"}
    slices = [e for e in events if e["ph"] == "X"]
    assert slices and all(isinstance(e["pid"], int) and isinstance(e["tid"], int)
                          for e in slices)
    assert all((e["pid"], e["tid"]) in threads and e["pid"] in procs for e in slices)
    return [procs[p] for p in sorted(procs, key=order.get)], threads


def test_the_trace_names_its_gpus_and_resources(capsys, tmp_path):
    path = tmp_path / "t.json"
    code, _, _ = _simulate(capsys, "studies/model_parallel.py", "--trace", str(path))
    assert code == 0
    procs, threads = _named(json.loads(path.read_text()))
    assert procs == [f"overlap-mm-fuse-ar-c (best): GPU {g}" for g in range(4)]
    # the GEMMs on a track of their own (issue 39: they were drawn on HBM's)
    assert set(threads.values()) == {"stream: statements", "HBM: kernel memory traffic",
                                     "link: NVLink / NIC transfers",
                                     "SMs: arithmetic-bound kernels (GEMMs)"}


def test_the_trace_can_hold_every_schedule(capsys, tmp_path):
    path = tmp_path / "t.json"
    code, _, _ = _simulate(capsys, "studies/model_parallel.py", "--trace", str(path),
                           "--trace-all")
    assert code == 0
    procs, _ = _named(json.loads(path.read_text()))
    assert procs == [f"{s}: GPU {g}" for s in ("unscheduled", "fuse-ar-c",
                                               "overlap-mm-fuse-ar-c (best)")
                     for g in range(4)]
    code, _, err = _simulate(capsys, "studies/model_parallel.py", "--trace-all")
    assert code == 2
    assert ("--trace-all must come with --trace FILE, got it alone; e.g. --trace "
            "timeline.json --trace-all") in err


def test_a_study_predicted_but_not_measured_has_its_figure(tmp_path):
    """measured.csv without the study (LAMB did not fit a GPU run): the figure shows the
    predictions alone (an empty measured frame once took the predicted rows' index)."""
    predicted, measured = _rmsnorm_tables()
    measured = measured.assign(study="adam")
    fig = figure("allreduce_rmsnorm", predicted, measured)
    assert len(fig.axes) == 3 and all(len(ax.get_lines()) == 3 for ax in fig.axes)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "measured" not in legend and "predicted" in legend
