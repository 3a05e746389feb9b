"""Links as shared resources: concurrent flows share them max-min fairly (design note 32).

A link has a capacity (bytes/s per direction: a GPU's NVLink, a NIC). A flow is a transfer
that alone runs at `bandwidth_Bps` (its bus bandwidth: the bottleneck of its path) and then
takes `work_s`; per byte it moves, it puts `weight[l]` bytes on each link l it crosses (1 on
a GPU's NVLink; on a NIC the rank's part of its collective's node traffic). Running flows
get rates x (bytes/s) that over-use no link (sum of weight * x <= capacity) and are max-min
fair: progressive filling raises every unfrozen flow's rate together until a link fills
(its flows freeze) or a flow reaches its own bandwidth. This is the flow-level model of
ASTRA-sim's congestion-aware analytical backend (and SimGrid's LMM solver without weights).
A flow at x takes work_s * bandwidth / x.

Alone, a flow runs at its bandwidth and finishes `work_s` after it started, exactly the time
of a plain timeout: the timeline of a program with nothing concurrent is unchanged.

Rates are recomputed only for the flows connected (through shared links) to the one that
started or ended, and not at all where they provably stay (design note 103): a flow that
starts with room for its whole bandwidth on each of its links (their `load`, the bytes/s
their flows put on them at their current rates, plus its own, within capacity) runs at its
bandwidth and changes no other flow's rate, and a flow that ends beside flows that all run
at their own bandwidth frees capacity nobody can use. Max-min fair rates are unique and
those are them, so only contention (a link that cannot carry every flow at its bandwidth)
pays for progressive filling: a large symmetric run's collectives, thousands of flows on a
leaf's shared uplink, cost O(links) per flow.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import simpy


class _Flow:
    __slots__ = ("uses", "bandwidth", "left_s", "rate", "since", "done", "version", "slowed")

    def __init__(self, uses: dict, bandwidth: float, work_s: float, now: float,
                 done: simpy.Event):
        self.uses = uses
        self.bandwidth = bandwidth
        self.left_s = work_s
        self.rate = 0.0  # none yet: its links' loads do not count it
        self.since = now
        self.done = done
        self.version = 0
        self.slowed = False  # whether it ever ran below its bandwidth


class Network:
    """The links of a cluster and the flows on them (module docstring)."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.flows_on: dict[Hashable, set[_Flow]] = {}
        self.capacity: dict[Hashable, float] = {}
        # link -> bytes/s its flows put on it at their current rates (kept while it has one)
        self.load: dict[Hashable, float] = {}

    def transfer(self, route: Route, work_s: float):
        """A SimPy generator: run a flow along `route` that alone takes `work_s`; returns
        when it is done, with whether it ran at its bandwidth throughout (no flow slowed
        it)."""
        if work_s <= 0:
            return True
        for link, (_, capacity) in route.links.items():
            self.capacity[link] = capacity
        flow = _Flow({k: w for k, (w, _) in route.links.items() if w > 0},
                     route.bandwidth_Bps, work_s, self.env.now, self.env.event())
        fits = True
        for link, w in flow.uses.items():
            on = self.flows_on.get(link)
            if on is None:
                on = self.flows_on[link] = set()
                self.load[link] = 0.0
            if self.load[link] + w * flow.bandwidth > self.capacity[link]:
                fits = False
            on.add(flow)
        if fits:
            # room for its whole bandwidth everywhere: at its bandwidth, nobody else slowed
            self._set_rate(flow, 1.0)
            self._schedule_end(flow)
        else:
            self._reshare(self._component(flow), flow)
        yield flow.done
        return not flow.slowed

    # ------------------------------------------------------------ internals

    def _set_rate(self, f: _Flow, rate: float) -> None:
        """Give `f` a new rate (keeping its links' loads) and invalidate its scheduled end."""
        for link, w in f.uses.items():
            self.load[link] += w * f.bandwidth * (rate - f.rate)
        f.rate = rate
        f.slowed = f.slowed or rate != 1.0
        f.version += 1

    def _component(self, flow: _Flow) -> list[_Flow]:
        """The flows connected to `flow` through shared links (itself included)."""
        seen, todo = {flow}, [flow]
        while todo:
            f = todo.pop()
            for link in f.uses:
                for g in self.flows_on.get(link, ()):
                    if g not in seen:
                        seen.add(g)
                        todo.append(g)
        return list(seen)

    def _reshare(self, flows: list[_Flow], new: _Flow | None = None) -> None:
        """Bring `flows` (a component; `new` the flow that just started in it, if one did) up
        to now, give them max-min fair rates, and schedule the end of each whose rate
        changed."""
        now = self.env.now
        for f in flows:
            if f.since < now:
                f.left_s -= (now - f.since) * f.rate
                f.since = now
        rates = max_min_rates([(f.uses, f.bandwidth) for f in flows], self.capacity)
        for f, r in zip(flows, rates):
            if f.rate == r and f is not new:
                continue  # unchanged: its scheduled end stands
            self._set_rate(f, r)
            self._schedule_end(f)

    def _schedule_end(self, f: _Flow) -> None:
        version = f.version
        timer = self.env.timeout(max(f.left_s, 0.0) / f.rate)  # rate 1 alone: exact
        timer.callbacks.append(lambda _ev, f=f, v=version: self._end(f, v))

    def _end(self, f: _Flow, version: int) -> None:
        if version != f.version or f.done.triggered:
            return  # rates changed since this end was scheduled
        f.left_s = 0.0
        f.since = self.env.now
        others = set()
        for link, w in f.uses.items():
            on = self.flows_on[link]
            on.discard(f)
            if on:
                others |= on
                self.load[link] -= w * f.bandwidth * f.rate
            else:
                del self.flows_on[link], self.load[link]
        f.done.succeed()
        # the flows that shared a link with it may speed up, unless all run at their own
        # bandwidth already (then no rate anywhere changes: module docstring)
        done = set()
        for g in others:
            if g.rate != 1.0 and g not in done:
                component = self._component(g)
                done.update(component)
                self._reshare(component)


def max_min_rates(flows: list[tuple[Mapping[Hashable, float], float]],
                  capacity: Mapping[Hashable, float]) -> list[float]:
    """Each flow's rate as a fraction of its bandwidth, for flows given as (weight per link,
    bandwidth_Bps) on links of `capacity` (bytes/s): max-min fair by progressive filling
    (module docstring). A flow that reaches its bandwidth gets exactly 1."""
    n = len(flows)
    rates = [1.0] * n
    frozen = [False] * n
    left = {link: capacity[link] for uses, _ in flows for link in uses}
    level = 0.0  # the common rate (bytes/s) of the unfrozen flows
    while not all(frozen):
        demand = {}  # link -> bytes/s it takes per byte/s of the common rate
        step = math.inf
        for i, (uses, bandwidth) in enumerate(flows):
            if not frozen[i]:
                step = min(step, bandwidth - level)
                for link, w in uses.items():
                    demand[link] = demand.get(link, 0.0) + w
        for link, d in demand.items():
            step = min(step, left[link] / d)
        level += step
        for link, d in demand.items():
            left[link] -= d * step
        full = {link for link, d in demand.items() if left[link] <= 1e-9 * capacity[link]}
        for i, (uses, bandwidth) in enumerate(flows):
            if frozen[i]:
                continue
            if level >= bandwidth * (1 - 1e-12):
                rates[i], frozen[i] = 1.0, True
            elif any(link in full for link in uses):
                rates[i], frozen[i] = level / bandwidth, True
    return rates


@dataclass(frozen=True, slots=True)
class Route:
    """Where a flow runs: `links[link] = (bytes on it per byte of the flow, its capacity in
    bytes/s)`, and the flow's own bandwidth alone (bytes/s)."""

    links: Mapping[Hashable, tuple[float, float]]
    bandwidth_Bps: float
