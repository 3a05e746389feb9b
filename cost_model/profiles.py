"""Hardware profiles: a preset name or a profile file (JSON or YAML) -> Cluster.

A profile replaces any field of its base preset:

    {"base": "h200x4", "gpu": {"hbm_bandwidth_Bps": 3.9e12}, "nvlink": {"latency_s": 1e-6}}
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from cost_model.presets import PRESETS, preset
from cost_model.specs import Cluster
from cost_model.validate import coerce, profile_schema, profile_text
from workbench.errors import HardwareError
from workbench.schemas import check


def load_hardware(spec: str, nodes: int = 1, nvls: bool | None = None) -> Cluster:
    """A preset name or a profile file path (JSON or YAML) -> Cluster with `nodes` nodes;
    `nvls` False switches NVLink SHARP off (`simulate --no-nvls`, as NCCL_NVLS_ENABLE=0),
    None keeps the cluster's."""
    path = Path(spec)
    if path.suffix.lower() in (".json", ".yaml", ".yml"):
        cluster = load_profile(path).with_nodes(nodes) if nodes != 1 else load_profile(path)
    else:
        cluster = preset(spec, nodes)
    if nvls is not None and nvls != cluster.nvls:
        cluster = dataclasses.replace(cluster, nvls=nvls)
    return cluster


def load_profile(path: Path) -> Cluster:
    """Read a profile file: {"base": PRESET, <field>: value or {<subfield>: value}}."""
    if not path.is_file():
        raise HardwareError(f"hardware profile must be an existing file, got {path}")
    text = profile_text(path)  # at most 1 MiB of UTF-8 (cost_model.validate)
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as e:  # json and yaml raise different error types; both mean malformed
        raise HardwareError(f"hardware profile {path} must be valid "
                            f"{path.suffix.lstrip('.').upper()}, got {type(e).__name__}"
                            f"{_where(e)}; fix the file there") from None
    if not isinstance(data, dict):
        raise HardwareError(f"hardware profile {path} must hold a mapping of fields, got "
                            f"{type(data).__name__}")
    if not data:
        raise HardwareError(f"hardware profile {path} must set at least one field (e.g. "
                            f'{{"base": "h100x8"}}), got an empty mapping; to use a preset, pass '
                            f"its name: --hardware {', '.join(PRESETS)}")
    return profile_cluster(data, f"hardware profile {path}")


def profile_cluster(profile: dict, where: str) -> Cluster:
    """The cluster a profile mapping describes ({"base": PRESET, <field>: value ...}): its
    base preset with the fields it sets, checked against `profile_schema` of that preset;
    `where` (the file) begins every error."""
    data = dict(profile)
    base = data.pop("base", "h200x4")
    if not isinstance(base, str) or base not in PRESETS:
        raise HardwareError(f"{where} field base must be a preset name ({', '.join(PRESETS)}), "
                            f"got {'another string' if isinstance(base, str) else 'no string'}"
                            "; fix the profile")
    cluster = preset(base)
    schema = profile_schema(cluster)
    data = coerce(data, schema)
    check(data, schema, where, "fix the profile", HardwareError)
    return override(cluster, data)


def _where(e: Exception) -> str:
    """Where a JSON or YAML parse error is, by line and column only: YAML's own message
    quotes the offending lines, and a profile path may be a link to a file of secrets."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    if mark is not None:
        return f" at line {mark.line + 1} column {mark.column + 1}"
    if getattr(e, "lineno", None) is not None:  # json.JSONDecodeError
        return f" at line {e.lineno} column {e.colno}"
    return ""


def override(obj: Any, changes: dict) -> Any:
    """`obj` (a frozen dataclass) with fields replaced from `changes`, recursively; `changes`
    has passed `profile_schema(obj)` (cost_model.validate), so every name and value fits."""
    fields = {f.name: f for f in dataclasses.fields(obj)}
    new = {}
    # Tables of a field's per-name variants (metadata "template": Cluster.nccl_dtypes) come
    # last, so that their entries start from the field as this profile changed it.
    last = [k for k in changes if fields[k].metadata.get("template")]
    for key in [k for k in changes if k not in last] + last:
        value, old = changes[key], getattr(obj, key)
        template = fields[key].metadata.get("template")
        if template:  # a name already in the table changes its entry, a new one starts from
            base = new.get(template, getattr(obj, template))  # the template (nccl)
            table = dict(old)
            new[key] = tuple({**table, **{name: override(table.get(name, base), sub)
                                          for name, sub in value.items()}}.items())
        elif dataclasses.is_dataclass(old):
            new[key] = override(old, value)
        elif isinstance(old, tuple) and old and dataclasses.is_dataclass(old[0]):
            by_name = {item.name: item for item in old}
            new[key] = tuple(override(item, value[name]) if name in value else item
                             for name, item in by_name.items())
        elif isinstance(old, tuple):
            # a profile's efficiency table is a measured grid of its own: it replaces the
            # base's (merged, two grids of different axes would leave holes)
            table = {} if key in _REPLACED_TABLES else dict(old)
            new[key] = tuple({**table, **value}.items())
        else:
            new[key] = value
    return dataclasses.replace(obj, **new)


_REPLACED_TABLES = ("efficiency_table",)
