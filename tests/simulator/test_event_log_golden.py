"""Golden simulator event logs: the timeline of small, fixed runs is pinned, so a change to the
simulator or the cost model that moves any event shows up as a reviewed golden diff
(regenerate with WORKBENCH_REGEN_GOLDEN=1)."""

import pytest
from conftest import assert_golden, load_study

from cost_model.hardware import preset
from simulator import simulate
from workbench.interpreter import bind_sizes

CASES = [
    ("studies/sgd.py", None, {"N": 2**20, "P": 2}),
    ("studies/sgd.py", "fuse-rs-c-ag", {"N": 2**20, "P": 2}),
    ("studies/model_parallel.py", "overlap-mm-fuse-ar-c", {"T": 1024, "H": 1024, "P": 2}),
    ("studies/pipeline.py", "fuse-rs-c-send-ag", {"T": 1024, "H": 1024, "P": 2}),
    ("studies/allreduce_rmsnorm.py", None, {"T": 128, "H": 4096, "P": 2}),
    ("studies/allreduce_rmsnorm.py", "fuse-rs-c-ag", {"T": 128, "H": 4096, "P": 2}),
]


def _event_log(result) -> str:
    df = result.dataframe().sort_values(["t_start", "gpu", "resource", "op"])
    lines = [f"# {result.note()}; time {result.time_s * 1e6:.3f} us"]
    lines += [f"{r.t_start * 1e6:12.3f} {r.t_end * 1e6:12.3f}  gpu{r.gpu}  {r.resource:<6} {r.op}"
              for r in df.itertuples()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("spec,schedule,sizes", CASES)
def test_event_log_is_golden(spec, schedule, sizes):
    f = load_study(spec)
    program = f.schedules[schedule].apply() if schedule else f.program
    result = simulate(program, preset("h200x4"), bind_sizes(program, sizes), reduced=False)
    name = f"{spec.split('/')[1].removesuffix('.py')}-{schedule or 'unscheduled'}"
    assert_golden(f"simulator/{name}.log", _event_log(result))


def test_event_log_with_ranks_that_differ_is_golden():
    """A slow GPU (3: computation x2) and a degraded link (GPU 1: x1.5) on 4 GPUs: pins the
    full mode's ring solver and the variability in a reviewed timeline."""
    from simulator import Variability

    f = load_study("studies/sgd.py")
    program = f.schedules["rs-c-ag"].apply()
    result = simulate(program, preset("h200x4"), bind_sizes(program, {"N": 2**20, "P": 4}),
                      variability=Variability(slow=((3, 2.0),), degraded=((1, 1.5),)))
    assert not result.reduced
    assert_golden("simulator/sgd-rs-c-ag-slow3-degraded1.log", _event_log(result))
