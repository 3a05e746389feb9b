"""Links as shared resources: concurrent flows share them max-min fairly (design note 32).

A flow is a transfer that alone would take `work_s` seconds and, at that full speed, uses a
share `u[l]` of each link l it crosses (1 on its bottleneck, less on a faster link of its
path). Running flows get rates r in (0, 1] (the fraction of their full speed) such that no
link is over-used (sum of u[l] * r <= 1 for every link) and the allocation is max-min fair:
progressive filling raises every unfrozen flow's rate together until a link saturates (its
flows freeze) or a flow reaches full speed. This is the flow-level model of ASTRA-sim's
congestion-aware analytical backend and of SimGrid's LMM solver without weights.

Alone, a flow runs at rate 1 and finishes `work_s` after it started, exactly the time of a
plain timeout: the timeline of a program with nothing concurrent is unchanged.

Rates are recomputed only for the flows connected (through shared links) to the one that
started or ended, so disjoint flows (every GPU's own NVLink, each node's NICs) cost O(1) each.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import simpy

# Work left below this (seconds at full speed) is done: float residue of rate changes.
EPS_S = 1e-15


class _Flow:
    __slots__ = ("uses", "left_s", "rate", "since", "done", "version")

    def __init__(self, uses: dict, work_s: float, now: float, done: simpy.Event):
        self.uses = uses
        self.left_s = work_s
        self.rate = 1.0
        self.since = now
        self.done = done
        self.version = 0


class Network:
    """The links of a cluster and the flows on them (module docstring)."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.flows_on: dict[Hashable, set[_Flow]] = {}

    def transfer(self, uses: Mapping[Hashable, float], work_s: float):
        """A SimPy generator: run a flow of `work_s` seconds at full speed using share
        `uses[link]` of each link; returns when it is done."""
        if work_s <= 0:
            return
        flow = _Flow({k: float(u) for k, u in uses.items() if u > 0}, work_s, self.env.now,
                     self.env.event())
        for link in flow.uses:
            self.flows_on.setdefault(link, set()).add(flow)
        self._reshare(flow)
        yield flow.done

    def rate(self, flow: _Flow) -> float:
        """A flow's current rate (for tests)."""
        return flow.rate

    # ------------------------------------------------------------ internals

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

    def _reshare(self, flow: _Flow) -> None:
        """Bring the flows connected to `flow` up to now, give them max-min fair rates, and
        schedule each one's end."""
        now = self.env.now
        flows = self._component(flow)
        for f in flows:
            if f.since < now:
                f.left_s -= (now - f.since) * f.rate
                f.since = now
        rates = max_min_rates([f.uses for f in flows])
        for f, r in zip(flows, rates):
            if f.rate == r and f is not flow and f.version:
                continue  # unchanged: its scheduled end stands
            f.rate = r
            f.version += 1
            self._schedule_end(f)

    def _schedule_end(self, f: _Flow) -> None:
        version = f.version
        timer = self.env.timeout(max(f.left_s, 0.0) / f.rate)
        timer.callbacks.append(lambda _ev, f=f, v=version: self._end(f, v))

    def _end(self, f: _Flow, version: int) -> None:
        if version != f.version or f.done.triggered:
            return  # rates changed since this end was scheduled
        f.left_s = 0.0
        f.since = self.env.now
        others = set()
        for link in f.uses:
            on = self.flows_on[link]
            on.discard(f)
            others |= on
            if not on:
                del self.flows_on[link]
        f.done.succeed()
        done = set()
        for g in others:  # the flows that shared a link with it may speed up
            if g not in done:
                component = self._component(g)
                done.update(component)
                self._reshare(g)


def max_min_rates(uses: list[Mapping[Hashable, float]]) -> list[float]:
    """Max-min fair rates in (0, 1] of flows using share `uses[i][link]` of each link at full
    speed (progressive filling; see the module docstring)."""
    n = len(uses)
    rates = [0.0] * n
    frozen = [False] * n
    left = {}  # link -> capacity left
    for u in uses:
        for link in u:
            left[link] = 1.0
    level = 0.0
    while not all(frozen):
        # how far every unfrozen flow can rise together before a link fills or a flow is full
        demand = {}
        for i, u in enumerate(uses):
            if not frozen[i]:
                for link, share in u.items():
                    demand[link] = demand.get(link, 0.0) + share
        step = 1.0 - level
        for link, d in demand.items():
            if d > 0:
                step = min(step, left[link] / d)
        level += step
        for link, d in demand.items():
            left[link] -= d * step
        full = {link for link, d in demand.items() if d > 0 and left[link] <= 1e-12}
        for i, u in enumerate(uses):
            if frozen[i]:
                continue
            if level >= 1.0 - 1e-12 or any(link in full for link in u):
                rates[i] = min(level, 1.0) if level < 1.0 - 1e-12 else 1.0
                frozen[i] = True
    return rates
