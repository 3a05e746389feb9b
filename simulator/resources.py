"""What one simulation holds: the resources of each simulated GPU (`_Gpu`), what several
simulations on one cluster share (`Shared`), a collective's meeting of ranks in the full mode
(`_Meeting`), one statement to run (`_Run`), the halves of a fused kernel's traffic
(`FusedCopy`), and the granularity constants of the model."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import simpy

from cost_model.hardware import Cluster
from simulator.network import Network
from simulator.variability import Draw
from workbench.types import Group

# Ranks above which simulate() reduces by symmetry unless told otherwise.
FULL_RANK_LIMIT = 16
# Computation kernels are cut into this many chunks (thread-block waves, coarsely) so that
# overlapped kernels interleave on HBM at this granularity.
COMPUTE_CHUNKS = 8
# Most events one reduced collective may cost: identical ring steps are batched beyond this.
MAX_STEP_EVENTS = 64
# Chunks of a fused collective kernel's pipeline (load -> compute -> store).
FUSED_CHUNKS = 8
# Above this many simulated ranks a run first collects the garbage of the runs before it
# (collector_paused): below, the collection would cost more than the run.
COLLECT_RANKS = 1024
# Up to this many simulated ranks the timeline has a row per computation chunk and ring
# step; above it one row per kernel and collective (the timeline would outgrow the run).
DETAIL_RANKS = 64


class Environment(simpy.Environment):
    """SimPy's environment, counting the events it processes (`events`: the simulator's
    unit of work, which benchmarks/simulate_scale.py reports)."""

    def __init__(self):
        super().__init__()
        self.events = 0

    def step(self) -> None:
        """Process the next event (SimPy's step), counted."""
        self.events += 1
        super().step()


@contextlib.contextmanager
def collector_paused(collect: bool = True) -> Iterator[None]:
    """Run a simulation without Python's cyclic garbage collector, after one collection
    (`collect`; a large run's: COLLECT_RANKS).

    A full run keeps every rank's process, GPU and pending events alive and allocates
    millions of short-lived ones; the collector's generational passes kept re-scanning
    them, about 60 % of the CPU time at 4096 GPUs (`benchmarks/simulate_scale.py`, design
    note 103). A run makes no cyclic garbage (reference counting frees its consumed events
    and finished generators), so nothing accumulates while the collector waits; the
    collection before the run frees the previous run's cycles (a simulation and its
    processes refer to each other), which keeps the peak to one run's. It walks every live
    object (tens of ms in a bare process), so a small run, whose predecessor's garbage is
    small too, skips it."""
    enabled = gc.isenabled()
    if collect:
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Gpu:
    """The resources of one simulated GPU. Its SimPy resources are made when first used: a
    solo run (Simulation.solo) never asks for most of them, and at 131072 GPUs three SimPy
    objects per GPU were a tenth of the run's time and memory."""

    __slots__ = ("id", "compute_factor", "link_factor", "busy", "_env", "_sm_count",
                 "_link", "_hbm", "_sms")

    def __init__(self, env: simpy.Environment, cluster: Cluster, gpu_id: int,
                 compute_factor: float = 1.0, link_factor: float = 1.0):
        self.id = gpu_id
        self.compute_factor = compute_factor  # a straggler's slowdown (simulator.variability)
        self.link_factor = link_factor  # a degraded link's
        self.busy = {"link": 0.0, "hbm": 0.0}
        self._env = env
        self._sm_count = cluster.gpu.sm_count
        self._link = self._hbm = self._sms = None

    @property
    def link(self) -> simpy.Resource:
        """The turn a fused kernel's loads and stores take."""
        if self._link is None:
            self._link = simpy.Resource(self._env, capacity=1)
        return self._link

    @property
    def hbm(self) -> simpy.Resource:
        """The memory pipeline that computation chunks hold."""
        if self._hbm is None:
            self._hbm = simpy.Resource(self._env, capacity=1)
        return self._hbm

    @property
    def sms(self) -> simpy.Container:
        """The SMs: a communication kernel holds one per NCCL channel, a computation kernel
        takes what is free."""
        if self._sms is None:
            self._sms = simpy.Container(self._env, capacity=self._sm_count,
                                        init=self._sm_count)
        return self._sms


@dataclass(frozen=True)
class FusedCopy:
    """The load (reduce-scatter) or store (all-gather, send) half of a fused kernel's parts."""

    full: object
    rs: bool

    @property
    def parts(self):
        """The fused kernel's parts with only this half's link traffic."""
        if self.rs:
            return dataclasses.replace(self.full, ag_nbytes=0, send_nbytes=0)
        return dataclasses.replace(self.full, rs_nbytes=0)


@dataclass(slots=True)
class Shared:
    """What the simulations of several programs on one cluster share (simulator.mesh): the
    SimPy environment, the network, the physical cluster, its GPUs by id as they are created,
    the timeline, the variability draw, and `placement(group, rank) -> GPU id`."""

    env: simpy.Environment
    network: Network
    cluster: Cluster
    placement: Callable[[Group, int], int]
    draw: Draw
    rows: list = field(default_factory=list)
    gpus: dict = field(default_factory=dict)


@dataclass(slots=True)
class _Meeting:
    """The ranks of one collective in the full simulation: when each arrived, its step
    time, and, once all have, every rank's finish (and per-step starts for the timeline)."""

    arrive: np.ndarray
    step_s: np.ndarray
    done: simpy.Event
    count: int = 0
    finish: np.ndarray | None = None
    starts: np.ndarray | None = None
    done_at: float = 0.0  # when the last rank arrived


