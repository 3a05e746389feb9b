"""Chrome/Perfetto traces of simulated timelines (the JSON object format, microseconds).

One trace can hold several schedules' timelines: each simulated GPU of each schedule is a
process named "<schedule>: GPU <g>", each resource it holds a thread named by what it is (the
statements on its stream, its HBM traffic, its link transfers), with sort indices so the
processes keep the order given and the threads the same order in every process. Open the file
in https://ui.perfetto.dev or chrome://tracing; every schedule starts at t = 0, so their
timelines line up for comparison.
"""

from __future__ import annotations

from collections.abc import Sequence

# Each resource of a simulated GPU (simulator.engine's Row.resource), in the order shown, with
# the thread name that says what its slices are.
THREADS = {
    "stream": "stream: statements",
    "hbm": "HBM: kernel memory traffic",
    "link": "link: NVLink / NIC transfers",
    "sm": "SMs: arithmetic-bound kernels (GEMMs)",
}


def chrome_trace(runs: Sequence[tuple[str, object]]) -> dict:
    """The trace of `runs`, (schedule name, simulator SimResult) pairs, in their order. An
    empty name leaves the processes named "GPU <g>" (a single timeline)."""
    events: list[dict] = []
    resources = list(THREADS) + sorted({r.resource for _, result in runs for r in result.rows}
                                       - set(THREADS))
    tid = {res: i + 1 for i, res in enumerate(resources)}
    pid = 0
    for name, result in runs:
        gpus = sorted({r.gpu for r in result.rows})
        pids = {}
        for gpu in gpus:
            pid += 1
            pids[gpu] = pid
            label = f"{name}: GPU {gpu}" if name else f"GPU {gpu}"
            events.append(_meta("process_name", pid, {"name": label}))
            events.append(_meta("process_sort_index", pid, {"sort_index": pid}))
            for res in sorted({r.resource for r in result.rows if r.gpu == gpu}, key=tid.get):
                events.append(_meta("thread_name", pid, {"name": THREADS.get(res, res)},
                                    tid[res]))
                events.append(_meta("thread_sort_index", pid, {"sort_index": tid[res]},
                                    tid[res]))
        events += [{"name": r.op, "cat": r.resource, "ph": "X", "ts": r.t_start * 1e6,
                    "dur": (r.t_end - r.t_start) * 1e6, "pid": pids[r.gpu], "tid": tid[r.resource]}
                   for r in result.rows]
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def _meta(name: str, pid: int, args: dict, tid: int = 0) -> dict:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}
