"""CUDA-graph timing of a plan's steps (issue 25): capture one execution of the program's
launches into a CUDA graph once, replay it, and time each replay with CUDA events, as a
serving or training engine runs a fixed sequence of kernels and collectives (the host's
launch time, which dominates small sizes, is then paid once at capture).

pycuda (2026.1) has no graph API, so the capture goes through the driver directly (ctypes on
libcuda: cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiateWithFlags,
cuGraphLaunch) on a pycuda stream; the kernels are launched on it by the executor's own
`launch`, NCCL calls by its `nccl` (NCCL supports capture). Kernels whose arguments change
per launch cannot replay from a frozen graph: a collective kernel that takes its barrier
`epoch` as an argument would meet stale flags on the second replay, so such plans are not
graphed (`graph_problem` says why). Row collectives count their launches in device memory
instead (codegen/cuda/include/wb_launch.cuh) and replay correctly.
"""

from __future__ import annotations

import ctypes

from workbench.runtime.executor import PlanRun, Timing
from workbench.runtime.launches import KernelLaunch, NcclCall

# CUstreamCaptureMode: relaxed, so that pycuda's own calls on other streams during the
# capture (none are expected) are not refused.
_CAPTURE_RELAXED = 2
_GRAPHABLE = (KernelLaunch, NcclCall)


def graph_problem(run: PlanRun) -> str:
    """Why the run's plan cannot be captured and replayed ("" when it can)."""
    for item in run.launches:
        if not isinstance(item, _GRAPHABLE):
            return (f"a {type(item).__name__} step must not be in a graphed plan (kernels and "
                    "NCCL collectives only)")
        if isinstance(item, KernelLaunch) and item.epoch_at is not None:
            return (f"kernel {item.step.spec.name} takes its barrier epoch as an argument, "
                    "which a graph would replay frozen")
        if isinstance(item, KernelLaunch) and any(
                p.kind in ("seq", "chunk", "win_first", "win_count")
                for p in item.step.spec.params):
            return f"kernel {item.step.spec.name} takes per-launch arguments"
    return ""


class _Driver:
    """The few CUDA driver graph calls, through ctypes."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            from workbench.errors import RuntimeFault

            raise RuntimeFault(f"{what} must succeed, got CUDA error {rc} "
                               f"({(name.value or b'?').decode()})")

    def capture(self, stream: int, enqueue) -> tuple[ctypes.c_void_p, ctypes.c_void_p]:
        h = ctypes.c_void_p(stream)
        self.check(self.lib.cuStreamBeginCapture_v2(h, ctypes.c_int(_CAPTURE_RELAXED)),
                   "cuStreamBeginCapture")
        try:
            enqueue()
        finally:
            graph = ctypes.c_void_p()
            rc = self.lib.cuStreamEndCapture(h, ctypes.byref(graph))
        self.check(rc, "cuStreamEndCapture")
        exe = ctypes.c_void_p()
        self.check(self.lib.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph,
                                                        ctypes.c_ulonglong(0)),
                   "cuGraphInstantiateWithFlags")
        return graph, exe

    def launch(self, exe, stream: int) -> None:
        self.check(self.lib.cuGraphLaunch(exe, ctypes.c_void_p(stream)), "cuGraphLaunch")

    def destroy(self, graph, exe) -> None:
        self.lib.cuGraphExecDestroy(exe)
        self.lib.cuGraphDestroy(graph)


class GraphedRun:
    """One captured execution of a PlanRun's launches, replayed on its own stream."""

    def __init__(self, run: PlanRun):
        problem = graph_problem(run)
        if problem:
            from workbench.errors import RuntimeFault

            raise RuntimeFault(f"the plan must be capturable into a CUDA graph, got: {problem}")
        self.run, self.drv = run, run.gpu.drv
        self.stream = self.drv.Stream()
        self.handle = int(self.stream.handle)
        self.cu = _Driver()
        # Capture once: every launch of the program, in order, on the capture stream.
        self.graph, self.exe = self.cu.capture(self.handle, self._enqueue)

    def _enqueue(self) -> None:
        for item in self.run.launches:
            if isinstance(item, NcclCall):
                self.run.nccl(item, self.handle)
            else:
                self.run.launch(item, self.stream)

    def replay(self) -> None:
        """Enqueue one replay of the captured program on the graph's stream."""
        self.cu.launch(self.exe, self.handle)

    def time(self, warmup: int, reps: int) -> Timing:
        """CUDA-event time of each of `reps` replays after `warmup` replays, in ms; each on the
        inputs as uploaded (restored, outside the timed region, GPU idle at the start)."""
        run = self.run
        for _ in range(warmup):
            run.restore_inputs()
            self.drv.Context.synchronize()
            self.replay()
        self.drv.Context.synchronize()
        start, end = self.drv.Event(), self.drv.Event()
        times = []
        for _ in range(reps):
            run.restore_inputs()
            self.drv.Context.synchronize()
            start.record(self.stream)
            self.replay()
            end.record(self.stream)
            end.synchronize()
            times.append(start.time_till(end))
        return Timing(times)

    def free(self) -> None:
        self.drv.Context.synchronize()
        self.cu.destroy(self.graph, self.exe)


def measure(run: PlanRun, check, warmup: int, reps: int):
    """Graphed timing of a checked run: (Timing, the check of the outputs the last replay
    left, from `check()`), or (None, why not) for a plan that cannot be graphed. Every rank
    gets the same answer (the plan decides), so the callers' collectives stay in step."""
    problem = graph_problem(run)
    if problem:
        return None, problem
    run.poison()  # the replays must write every output again
    graphed = GraphedRun(run)
    try:
        timing = graphed.time(warmup, reps)
        result = check()
    finally:
        graphed.free()
    return timing, result
