"""Validation of the numbers a hardware profile gives: what physics allows for each field.

A profile is data from a file (JSON or YAML): `NaN`, `"nan"`, YAML's `.nan`, `inf`, 1e9
efficiencies, `max_channels: 0.2`, 5e-324 bandwidths and `fabric.tiers: 1e9` all parse. Each
value the loader takes goes through `profile_value`, which returns it as the field's type or
raises HardwareError naming the field, what it must be and the fix. The rules are one table
(`RULES`), keyed by the field's own name, so that a field has one rule wherever it appears
(gpu.sm_count, nccl_dtypes.f16.max_channels, nccl.protocols.LL.efficiency).

Pure functions only: the loader (cost_model.hardware) calls them; nothing here reads files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from workbench.errors import HardwareError


@dataclass(frozen=True, slots=True)
class Rule:
    """What a field's value must be: an integer or a real, within [low, high] (`low_open`:
    low itself excluded), in `unit`; `example` goes into the message's fix."""

    integer: bool
    low: float
    high: float
    low_open: bool
    unit: str
    example: str

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        low = f"> {_g(self.low)}" if self.low_open else f">= {_g(self.low)}"
        return f"{kind} {low} and <= {_g(self.high)}" + (f" ({self.unit})" if self.unit else "")


def _g(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


# A rate below one unit per second (5e-324 B/s) makes every time infinite; above 1e18 (an
# exabyte or exaFLOP per second per GPU) is no GPU there is.
RATE = Rule(False, 1.0, 1e18, False, "per second", "e.g. 3.3e12 for 3.3 TB/s")
# Times of one event (a launch, a hop, a protocol step): at most an hour.
TIME = Rule(False, 0.0, 3600.0, False, "seconds", "e.g. 2e-6 for 2 us")
# Shares of a peak: at least 1/1000 (a denormal share, 5e-324, made every time infinite).
FRACTION = Rule(False, 1e-3, 1.0, False, "a share of the peak", "e.g. 0.85")
BYTES = Rule(False, 1.0, 2.0 ** 60, False, "bytes", "e.g. 141e9")

RULES: dict[str, Rule] = {
    # counts (integers: a profile's 0.2 channels is a mistake, never truncated to 0)
    "sm_count": Rule(True, 1, 100_000, False, "SMs", "e.g. 132"),
    "max_channels": Rule(True, 1, 1024, False, "NCCL channels", "e.g. 32"),
    "gpus_per_node": Rule(True, 1, 100_000, False, "GPUs", "e.g. 8"),
    "nodes": Rule(True, 1, 1_000_000, False, "nodes", "e.g. 4"),
    "nics_per_node": Rule(True, 0, 100_000, False, "0: one NIC per GPU", "e.g. 8"),
    # the fabric: 2 (radix/2)^tiers end points must stay a number the model can hold
    "tiers": Rule(True, 1, 6, False, "switch levels", "e.g. 3"),
    "switch_radix": Rule(True, 2, 4096, False, "ports per switch", "e.g. 64"),
    "nodes_per_leaf": Rule(True, 1, 1_000_000, False, "nodes", "e.g. 32"),
    "oversubscription": Rule(False, 1.0, 1e6, False, "downlink : uplink", "e.g. 1"),
    # shares of a peak
    "efficiency": FRACTION,
    # a GEMM's or attention's achieved / peak_flops (cost_model.efficiency)
    "efficiency_table": Rule(False, 0.0, 1.0, True, "achieved / peak_flops for its "
                             "dtype", "e.g. 0.75"),
    # measured factors are 0.95 to 1.3; one near 0 (5e-324) made a ring AllReduce, which the
    # ring-fused form prices whatever NCCL would pick, take forever
    "allreduce_bandwidth_factor": Rule(False, 1e-3, 4.0, False, "AllReduce vs RS/AG bus "
                                       "bandwidth", "e.g. 0.95"),
    "fused_block_bandwidth": FRACTION,
    # a factor on the unroll 1 kernel's peer bandwidth (design note 95): more loads in flight
    # may be faster or slower, but not by orders of magnitude
    "fused_unroll_bandwidth": Rule(False, 0.1, 10.0, False, "unroll 1's peer bandwidth = 1",
                                   "e.g. 0.99"),
    # sizes
    "hbm_capacity_bytes": BYTES,
    "min_channel_bytes": BYTES,
    "dropout_element_s": TIME,
}


# A count the table does not name (nvlink_links, compute_capability): a positive integer.
COUNT = Rule(True, 1, 1e9, False, "a count", "e.g. 8")


def rule_for(key: str, integer: bool = False) -> Rule:
    """The rule of a field named `key` (its last component): the table's, else by its unit
    suffix (_Bps and peak_flops rates, _s times), else a positive integer for an integer
    field (`integer`) or a finite positive number."""
    if key in RULES:
        return RULES[key]
    if integer:
        return COUNT
    if key.endswith("_Bps") or key == "peak_flops":
        return RATE
    if key.endswith("_s"):
        return TIME
    return Rule(False, 0.0, 1e30, True, "", "a positive number")


def finite_number(value: Any) -> float | int | None:
    """`value` as an int or float if it is a finite real number (numeric strings too: YAML 1.1
    reads 1.0e11 as a string), else None. Booleans are not numbers here."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def profile_value(where: str, key: str, value: Any, *, allow_zero: bool = False,
                  integer: bool = False) -> int | float:
    """`value` of the profile field `where` (whose own name is `key`) checked against its rule
    and returned as the field's type (int for counts; `integer`: the field holds an int).
    `allow_zero`: a field whose 0 means "not known" or "none" (a latency,
    p2p_bandwidth_Bps) may also be 0."""
    rule = rule_for(key, integer)
    number = finite_number(value)
    ok = number is not None
    if ok and rule.integer:
        ok = float(number).is_integer()
    if ok and not (allow_zero and number == 0):
        ok = (number > rule.low if rule.low_open else number >= rule.low) and number <= rule.high
    if not ok:
        zero = " (or 0)" if allow_zero and not (rule.low == 0 and not rule.low_open) else ""
        raise HardwareError(f"hardware profile field {where} must be {rule.describe()}{zero}, "
                            f"got {value!r}; fix the profile ({rule.example})")
    return int(number) if rule.integer else float(number)


# A profile is a few kB; a file far larger is not one (a binary, a log, a dataset).
MAX_PROFILE_BYTES = 1 << 20


def profile_text(path) -> str:
    """The text of profile file `path` (a pathlib.Path): at most MAX_PROFILE_BYTES of UTF-8,
    else HardwareError saying what the file must be."""
    size = path.stat().st_size
    if size > MAX_PROFILE_BYTES:
        raise HardwareError(f"hardware profile {path} must be a JSON or YAML file of at most "
                            f"{MAX_PROFILE_BYTES} bytes, got {size} bytes; pass the profile "
                            "that workbench calibrate wrote")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HardwareError(f"hardware profile {path} must be UTF-8 text (JSON or YAML), got "
                            f"undecodable bytes at offset {e.start}; save it as UTF-8") from None
    if "\x00" in text:
        raise HardwareError(f"hardware profile {path} must be UTF-8 text (JSON or YAML), got a "
                            "NUL byte (a binary file?); pass the profile file")
    return text
