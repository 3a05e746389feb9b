"""Validation of a hardware profile: what physics allows for each field, as a JSON Schema.

A profile is data from a file (JSON or YAML): `NaN`, `"nan"`, YAML's `.nan`, `inf`, 1e9
efficiencies, `max_channels: 0.2`, 5e-324 bandwidths and `fabric.tiers: 1e9` all parse.
`profile_schema(cluster)` is the schema of a profile over `cluster` (its base preset), made from
the cluster's dataclasses: every field it may set, each number's rule from one table (`RULES`,
keyed by the field's own name, so that a field has one rule wherever it appears: gpu.sm_count,
nccl_dtypes.f16.max_channels, nccl.protocols.LL.efficiency); `workbench.schemas.check` turns
the first violation into one message naming the file, the field and what it must be, never the
value (a profile may be a link to a secret). `coerce` first reads numeric strings (YAML 1.1
reads 1.0e11 as a string) as numbers and integral floats of counts as ints.

Pure functions only: the loader (cost_model.profiles) calls them; nothing here reads files.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from workbench.errors import HardwareError
from workbench.ir import COLLECTIVES


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

    def schema(self, allow_zero: bool = False) -> dict:
        """The JSON Schema of a value under this rule; `allow_zero`: 0 too (a field whose 0
        means "not known" or "none")."""
        zero = allow_zero and (self.low_open or self.low > 0)
        low = {"exclusiveMinimum" if self.low_open else "minimum": self.low}
        if zero:  # 0, or within the rule: nothing in (0, low)
            low = {"minimum": 0, "not": {"exclusiveMinimum": 0, **(
                {"maximum": self.low} if self.low_open else {"exclusiveMaximum": self.low})}}
        return {"type": "integer" if self.integer else "number", **low, "maximum": self.high,
                "description": f"{self.describe()}{' (or 0)' if zero else ''}, {self.example}"}


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


def coerce(data: Any, schema: dict) -> Any:
    """`data` with what a profile may write for a number read as one, where `schema` wants
    one: a numeric string ("3.0e12"; "nan" becomes a non-finite float the schema refuses) as a
    float, an integral float (132.0) as an int for an integer, an int as a float for a real;
    mapping keys as strings (YAML reads `2:` as an int). Anything else is left for the schema
    to refuse."""
    kind = schema.get("type")
    if isinstance(data, dict):
        props, rest = schema.get("properties", {}), schema.get("additionalProperties", {})
        return {str(k): coerce(v, props.get(str(k), rest if isinstance(rest, dict) else {}))
                for k, v in data.items()}
    if kind not in ("number", "integer") or isinstance(data, bool):
        return data
    if isinstance(data, str):
        try:
            data = float(data)
        except ValueError:
            return data
    if isinstance(data, float) and kind == "integer" and data.is_integer():
        return int(data)
    if isinstance(data, int) and kind == "number":
        return float(data)
    return data


def profile_schema(obj: Any, where: str = "") -> dict:
    """The schema of a profile's changes to `obj` (a frozen dataclass of cost_model.specs,
    the base preset's Cluster at the top): each field by its current value's kind."""
    fields = [f for f in dataclasses.fields(obj) if f.init]
    return {"type": "object", "additionalProperties": False,
            "description": f"a mapping of {type(obj).__name__} fields",
            "properties": {f.name: _field_schema(obj, f) for f in fields}}


# The names a (name, number) table of a profile may hold, where they are a closed set: a
# misspelt collective in collective_latency_s was kept and never read (its latency 0).
TABLE_KEYS = {"collective_latency_s": tuple(c.kind for c in COLLECTIVES)}


def _field_schema(obj: Any, f: dataclasses.Field) -> dict:
    old = getattr(obj, f.name)
    template = f.metadata.get("template")
    if template:  # a table of per-name variants of another field (nccl_dtypes of nccl)
        base = getattr(obj, template)
        return {"type": "object", "additionalProperties": profile_schema(base),
                "description": f"a mapping by name of {type(base).__name__} fields"}
    if dataclasses.is_dataclass(old):
        return profile_schema(old)
    if isinstance(old, tuple) and old and dataclasses.is_dataclass(old[0]):
        return {"type": "object", "additionalProperties": False,
                "description": f"a mapping by name ({', '.join(i.name for i in old)})",
                "properties": {item.name: profile_schema(item) for item in old}}
    if isinstance(old, tuple):  # a (name, number) table
        known = TABLE_KEYS.get(f.name)
        return {"type": "object", "additionalProperties": rule_for(f.name).schema(),
                "description": "a mapping of names to numbers",
                **({"propertyNames": {"enum": list(known),
                                      "description": f"one of {', '.join(known)}"}}
                   if known else {})}
    if isinstance(old, bool):
        return {"type": "boolean", "description": "true or false (JSON/YAML booleans)"}
    if isinstance(old, str):
        return {"type": "string", "description": "a string (quote it in the profile)"}
    return rule_for(f.name, isinstance(old, int)).schema(allow_zero=f.default == 0)


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
