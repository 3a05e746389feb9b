"""benchmarks/gpu/trace_summary.py: a training step's trace in figures (no torch needed)."""

from __future__ import annotations

import gzip
import json

from conftest import load_script


def _module():
    return load_script("benchmarks/gpu/trace_summary.py")


def _trace():
    """Forward (a GEMM launched by addmm), the loss's backward, a backward GEMM, an update on
    a second stream; host: two AccumulateGrads and a compiled graph call."""
    def x(name, cat, ts, dur, tid, **args):
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "tid": tid,
                "args": args}
    return {"traceEvents": [
        x("aten::addmm", "cpu_op", 0, 50, 1),
        x("cudaLaunchKernel", "cuda_runtime", 10, 5, 1, correlation=7),
        x("## Call CompiledFxGraph abc ##", "cpu_op", 0, 400, 1),
        x("sm80_xmma_gemm_f32_tilesize32x32", "kernel", 100, 1000, 7, correlation=7),
        x("nll_loss_backward_kernel", "kernel", 1200, 200, 7),
        x("aten::mm", "cpu_op", 60, 30, 1),
        x("cudaLaunchKernel", "cuda_runtime", 70, 5, 1, correlation=9),
        x("cutlass_sgemm_nn", "kernel", 1500, 3000, 7, correlation=9),
        x("wb_collective_p1", "kernel", 1600, 2500, 9),
        x("torch::autograd::AccumulateGrad", "cpu_op", 500, 40, 2),
        x("torch::autograd::AccumulateGrad", "cpu_op", 600, 60, 2),
        {"ph": "M", "name": "process_name"}]}


def test_a_trace_in_figures(tmp_path, capsys):
    m = _module()
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(_trace(), f)
    s = m.summary(m.load(path))
    assert s["kernels_ms"] == 6.7 and s["streams_ms"] == {"7": 4.2, "9": 2.5}
    assert (s["main_forward_ms"], s["main_backward_ms"]) == (1.0, 3.2)
    assert s["host_accumulate_grad_ms"] == 0.1 and s["host_compiled_graphs_ms"] == 0.4
    assert [(g["op"], g["count"], g["ms"]) for g in s["gemms"]] == [("aten::mm", 1, 3.0),
                                                                  ("aten::addmm", 1, 1.0)]
    assert m.main([str(path)]) == 0
    assert "kernels_ms: 6.7" in capsys.readouterr().out


def test_bad_traces_are_named_with_exit_2(tmp_path, capsys):
    m = _module()
    assert m.main([str(tmp_path / "none.json")]) == 2
    assert "a trace must be a file" in capsys.readouterr().err
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"traceEvents": []}))
    assert m.main([str(empty)]) == 2
    assert "a trace must hold GPU kernels, got none" in capsys.readouterr().err
