"""The simulator's output: timeline rows and the result of one simulation (its time, its
timeline as a DataFrame or a Chrome/Perfetto trace, the busiest resources, and whether it was
reduced by symmetry)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Row:
    """One timeline row: `op` held `resource` of GPU `gpu` from t_start to t_end (seconds)."""

    t_start: float
    t_end: float
    gpu: int
    resource: str
    op: str


@dataclass
class SimResult:
    """What a simulation produced: the time, the timeline, and how it was reduced."""

    time_s: float
    rows: list[Row]
    ranks_simulated: int
    ranks_total: int
    reduced: bool
    busy_s: dict = field(default_factory=dict)  # resource -> busy seconds on the busiest GPU
    events: int = 0  # SimPy events the run processed (0: not a SimPy run)

    def dataframe(self):
        """The timeline as a pandas DataFrame (t_start, t_end, gpu, resource, op)."""
        import pandas as pd

        columns = ["t_start", "t_end", "gpu", "resource", "op"]
        return pd.DataFrame([[getattr(r, c) for c in columns] for r in self.rows],
                            columns=columns)

    def bottleneck(self, link_name: str = "nvlink") -> str:
        """The resource busy longest; 'latency' when none is busy half of the time."""
        if not self.busy_s or self.time_s <= 0:
            return "latency"
        res, busy = max(self.busy_s.items(), key=lambda kv: kv[1])
        if busy < 0.5 * self.time_s:
            return "latency"
        return link_name if res == "link" else res

    def note(self) -> str:
        """A sentence saying whether the simulation was reduced by symmetry."""
        if not self.reduced:
            return f"simulated all {self.ranks_total} ranks"
        return (f"reduced by symmetry: simulated {self.ranks_simulated} representative "
                f"rank(s) of {self.ranks_total}")

    def chrome_trace(self) -> dict:
        """The timeline as a Chrome/Perfetto trace (simulator.trace: named GPUs and
        resources)."""
        from simulator.trace import chrome_trace

        return chrome_trace([("", self)])
