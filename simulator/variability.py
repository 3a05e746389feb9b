"""Ranks that differ: stragglers, jitter and degraded links, seeded.

The cost model prices one nominal rank. A real step is as slow as its slowest participant,
so the simulator can make ranks differ (design note 31):

- `slow`: named GPUs whose computation takes `factor` times as long (a throttled GPU);
- `straggler_rate` / `straggler_slowdown`: each GPU, drawn with the seed, is a straggler
  with that probability and then computes `straggler_slowdown` times as slowly;
- `jitter`: every kernel of every GPU takes 1 + |N(0, jitter)| times its nominal time, drawn
  per GPU and statement (one-sided: noise only delays); a collective's (or a fused kernel's)
  steps are drawn each on their own, so its time is the mean of its S step factors (S =
  2(P-1) for a ring AllReduce), whose spread narrows as 1/sqrt(S): `Draw.steps_jitter`;
- `degraded`: named GPUs whose link (NVLink or NIC direction) moves data `factor` times as
  slowly: every ring step or transfer on it takes `factor` times as long.

Every draw comes from numpy's default generator seeded with (seed, sample), so a run is
reproducible and `--samples K` runs K independent draws. Factors are >= 1: the model is the
nominal (fastest) case and variability only delays it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.errors import WorkbenchError


class VariabilityError(WorkbenchError):
    """A variability setting that does not make sense (a rank not in the cluster, a factor
    below 1, a probability outside [0, 1])."""


# A rank a million times slower, or noise of 100 standard deviations, is no cluster: the
# bounds also keep the draws finite (inf or NaN factors made NaN times, then marked best).
MAX_FACTOR = 1e6
MAX_JITTER = 100.0


@dataclass(frozen=True, slots=True)
class Variability:
    """How ranks differ from the nominal one (see the module docstring); the default is
    none, and then every rank of a group is the same."""

    seed: int = 0
    slow: tuple[tuple[int, float], ...] = ()
    straggler_rate: float = 0.0
    straggler_slowdown: float = 1.0
    jitter: float = 0.0
    degraded: tuple[tuple[int, float], ...] = ()

    @property
    def active(self) -> bool:
        """Whether any rank may differ from another."""
        return bool(self.slow or self.degraded or self.jitter
                    or (self.straggler_rate and self.straggler_slowdown != 1.0))

    def check(self, world: int) -> None:
        """Raise VariabilityError naming the field, what it must be and the fix."""
        for field_, pairs, what in (("slow (--slow)", self.slow, "computation"),
                                    ("degraded (--degrade)", self.degraded, "link")):
            for rank, factor in pairs:
                if not (isinstance(rank, int) and 0 <= rank < world):
                    raise VariabilityError(
                        f"{field_} rank must be a GPU of the cluster (0..{world - 1}), got "
                        f"{rank!r}; name a rank below {world} or add --nodes")
                if not (isinstance(factor, (int, float)) and 1.0 <= factor <= MAX_FACTOR):
                    raise VariabilityError(  # the comparisons also refuse NaN and inf
                        f"{field_} factor of rank {rank} must be a finite number >= 1 and <= "
                        f"{MAX_FACTOR:g} (its {what} takes that "
                        f"many times its nominal time), got {factor!r}; use 1 for a nominal "
                        "rank, 2 for one twice as slow")
        if not 0.0 <= self.straggler_rate <= 1.0:
            raise VariabilityError(f"straggler_rate (--straggler-rate) must be a probability in "
                                   f"[0, 1], got {self.straggler_rate!r}; e.g. 0.01 for 1 GPU "
                                   "in 100")
        if not 1.0 <= self.straggler_slowdown <= MAX_FACTOR:
            raise VariabilityError(f"straggler_slowdown (--straggler-slowdown) must be a finite "
                                   f"number >= 1 and <= {MAX_FACTOR:g} (a "
                                   f"straggler computes that many times as slowly), got "
                                   f"{self.straggler_slowdown!r}; e.g. 1.5")
        if not 0.0 <= self.jitter <= MAX_JITTER:
            raise VariabilityError(f"jitter (--jitter) must be a standard deviation >= 0 and <= "
                                   f"{MAX_JITTER:g}, got {self.jitter!r}; e.g. 0.02 for 2 % "
                                   "noise per kernel")
        if not (isinstance(self.seed, int) and 0 <= self.seed < 2 ** 63) or (
                isinstance(self.seed, bool)):
            raise VariabilityError(f"seed (--seed) must be an integer >= 0 and < 2**63, got "
                                   f"{self.seed!r}; e.g. --seed 1")

    def draw(self, world: int, sample: int = 0) -> Draw:
        """Per-GPU factors and the jitter generator of one sample."""
        self.check(world)
        rng = np.random.default_rng([self.seed, sample])
        compute = np.ones(world)
        if self.straggler_rate:
            compute[rng.random(world) < self.straggler_rate] = self.straggler_slowdown
        for rank, factor in self.slow:
            compute[rank] = max(compute[rank], factor)
        link = np.ones(world)
        for rank, factor in self.degraded:
            link[rank] = factor
        return Draw(compute, link, self.jitter, rng)


@dataclass(slots=True)
class Draw:
    """One sample's factors: `compute[gpu]`, `link[gpu]`, and `jitter()` per statement."""

    compute: np.ndarray
    link: np.ndarray
    sigma: float
    rng: np.random.Generator

    def jitter(self) -> float:
        """1 + |N(0, sigma)|, or 1 without jitter (drawing nothing, so that the other draws
        of a seed do not depend on whether jitter is on)."""
        if not self.sigma:
            return 1.0
        return 1.0 + abs(float(self.rng.normal(0.0, self.sigma)))

    def steps_jitter(self, steps: int) -> float:
        """The factor of a run of `steps` steps each delayed by its own 1 + |N(0, sigma)|:
        their mean. Up to EXACT_STEPS steps it is drawn step by step; beyond, in closed form
        from the central limit theorem: a half-normal |N(0, s)| has mean s sqrt(2/pi) and
        variance s^2 (1 - 2/pi), so the mean of S of them is normal with that mean and the
        variance over S (clipped at 1: every step factor is >= 1). One draw either way, so a
        long collective costs no more than a short one. 1 without jitter (nothing drawn)."""
        if not self.sigma:
            return 1.0
        steps = max(int(steps), 1)
        if steps <= EXACT_STEPS:
            return 1.0 + float(np.abs(self.rng.normal(0.0, self.sigma, steps)).mean())
        mean = self.sigma * HALF_NORMAL_MEAN
        sd = self.sigma * HALF_NORMAL_SD / np.sqrt(steps)
        return 1.0 + max(float(self.rng.normal(mean, sd)), 0.0)


# Steps drawn one by one up to this many (the closed form beyond: Draw.steps_jitter).
EXACT_STEPS = 32
# |N(0, 1)|: mean sqrt(2/pi), standard deviation sqrt(1 - 2/pi).
HALF_NORMAL_MEAN = float(np.sqrt(2 / np.pi))
HALF_NORMAL_SD = float(np.sqrt(1 - 2 / np.pi))
