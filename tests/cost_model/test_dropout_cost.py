"""The one per-op cost the cost model prices: hashing a dropout mask adds a measured time per
element to the kernel that computes it (GPU run 17, one H200: the f16 bias + dropout +
residual epilogue on 8192 x 12288 took 0.222 ms, 0.179 without the dropout)."""

import dataclasses

import pytest
from plan_priced import priced

from cost_model.hardware import HardwareError, load_hardware, preset
from cost_model.ops import Work, work_s
from workbench.interpreter import bind_sizes
from workbench.loader import load

OPS = "studies/elementwise_ops.py"
T, H = 8192, 12288
SIZES = {"T": T, "H": H, "P": 1}


def _epilogue_s(name: str, cluster) -> float:
    pf = load(f"{OPS}:{name}")
    return priced(pf.program, cluster, bind_sizes(pf.program, SIZES)).time_s


def test_a_dropout_adds_its_hashing_to_the_streaming_time():
    cluster = preset("h200x4")
    plain, dropout = _epilogue_s("bias_residual", cluster), _epilogue_s(
        "bias_dropout_residual", cluster)
    assert dropout - plain == pytest.approx(T * H * cluster.gpu.dropout_element_s, rel=1e-9)
    # the preset's streaming time of the kernel without dropout, against run 17's 0.179 ms
    assert plain == pytest.approx(0.179e-3, rel=0.02)


def test_a_gpu_without_the_measurement_prices_no_hashing():
    h200 = preset("h200x4")
    unmeasured = dataclasses.replace(h200, gpu=dataclasses.replace(h200.gpu,
                                                                   dropout_element_s=0.0))
    assert _epilogue_s("bias_dropout_residual", unmeasured) == pytest.approx(
        _epilogue_s("bias_residual", unmeasured), rel=1e-9)
    assert preset("a100x8").gpu.dropout_element_s == 0.0


def test_hashing_slows_on_fewer_sms_and_scales_with_the_chunk():
    cluster = preset("h200x4")
    work = Work(0, 0, dropout_elements=1e6)
    assert work_s(cluster, work, sm_fraction=0.25) == pytest.approx(4 * work_s(cluster, work))
    assert work_s(cluster, work.scaled(0.5)) == pytest.approx(work_s(cluster, work) / 2)
    assert (work + work).dropout_elements == 2e6


def test_the_epilogue_stays_memory_bound():
    pf = load(f"{OPS}:bias_dropout_residual")
    cost = priced(pf.program, preset("h200x4"), bind_sizes(pf.program, SIZES))
    assert [s.bottleneck for s in cost.stmts] == ["hbm"]


def test_a_negative_dropout_cost_is_refused(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"base": "h200x4", "gpu": {"dropout_element_s": -1e-12}}')
    with pytest.raises(HardwareError, match=r"bad\.json field gpu\.dropout_element_s must be "
                                            r"a finite number >= 0 and <= 3600 \(seconds\), "
                                            r"e\.g\. 2e-6 for 2 us, got a number < 0"):
        load_hardware(str(path))
    with pytest.raises(HardwareError, match=r"gpu.dropout_element_s must be a time >= 0 "
                                            r"\(seconds per element\), got -1e-12"):
        dataclasses.replace(preset("h200x4").gpu, dropout_element_s=-1e-12)
