"""Click parameter types for numbers a user types: finite and in range, or one message.

click's FloatRange lets NaN through (every comparison with NaN is false) and takes `inf`;
`--jitter inf` or `--hang-timeout nan` then ran with a meaningless model or no hang
detection. `Finite` refuses both and says what the option expects; counts use
click.IntRange, which already refuses what is out of its range.
"""

from __future__ import annotations

import math

import click


class Finite(click.ParamType):
    """A finite float within [low, high] (`low_open`: low itself excluded)."""

    name = "number"

    def __init__(self, low: float, high: float, low_open: bool = False, example: str = ""):
        self.low, self.high, self.low_open, self.example = low, high, low_open, example

    def convert(self, value, param, ctx):
        if isinstance(value, float) and math.isfinite(value) and self._within(value):
            return value
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if math.isfinite(number) and self._within(number):
            return number
        low = f"> {self.low:g}" if self.low_open else f">= {self.low:g}"
        self.fail(f"must be a finite number {low} and <= {self.high:g}, got {value!r}"
                  + (f"; {self.example}" if self.example else ""), param, ctx)

    def _within(self, x: float) -> bool:
        return (x > self.low if self.low_open else x >= self.low) and x <= self.high

