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
from cost_model.validate import profile_text, profile_value
from workbench.errors import HardwareError
from workbench.ir import COLLECTIVES


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
    data = dict(data)
    base = data.pop("base", "h200x4")
    cluster = preset(str(base))
    return override(cluster, data, prefix="")


def _where(e: Exception) -> str:
    """Where a JSON or YAML parse error is, by line and column only: YAML's own message
    quotes the offending lines, and a profile path may be a link to a file of secrets."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    if mark is not None:
        return f" at line {mark.line + 1} column {mark.column + 1}"
    if getattr(e, "lineno", None) is not None:  # json.JSONDecodeError
        return f" at line {e.lineno} column {e.colno}"
    return ""


def override(obj: Any, changes: dict, prefix: str) -> Any:
    """`obj` (a frozen dataclass) with fields replaced from `changes`, recursively; a wrong
    field name or type raises HardwareError naming the field."""
    fields = {f.name: f for f in dataclasses.fields(obj)}
    new = {}
    # Tables of a field's per-name variants (metadata "template": Cluster.nccl_dtypes) come
    # last, so that their entries start from the field as this profile changed it.
    last = [k for k in changes if k in fields and fields[k].metadata.get("template")]
    for key in [k for k in changes if k not in last] + last:
        value = changes[key]
        where = f"{prefix}{key}"
        if key not in fields:
            raise HardwareError(f"hardware profile field {where} must be one of "
                                f"{', '.join(sorted(fields))}, got unknown field {key!r}")
        old = getattr(obj, key)
        template = fields[key].metadata.get("template")
        if template:
            base = new.get(template, getattr(obj, template))
            new[key] = _override_variants(old, value, where, base)
        elif dataclasses.is_dataclass(old):
            if not isinstance(value, dict):
                raise HardwareError(f"hardware profile field {where} must be a mapping of "
                                    f"{type(old).__name__} fields, got {value!r}")
            new[key] = override(old, value, f"{where}.")
        elif isinstance(old, tuple):
            new[key] = _override_tuple(old, value, where)
        elif isinstance(old, bool):
            if not isinstance(value, bool):
                raise HardwareError(f"hardware profile field {where} must be true or false, got "
                                    f"{value!r}; write {key}: false (JSON/YAML booleans)")
            new[key] = value
        elif isinstance(old, str):
            if not isinstance(value, str):
                raise HardwareError(f"hardware profile field {where} must be a string, got "
                                    f"{value!r}; quote it in the profile (e.g. \"{old}\")")
            new[key] = value
        else:  # a number: finite, in its field's range, an integer for counts
            new[key] = profile_value(where, key, value, allow_zero=fields[key].default == 0,
                                     integer=isinstance(old, int))
    return dataclasses.replace(obj, **new)


def _override_variants(old: tuple, value: Any, where: str, base: Any) -> tuple:
    """A (name, dataclass) table from a mapping name -> {field: value}: a name already in
    the table changes its entry, a new name starts from `base` (e.g. nccl_dtypes from nccl)."""
    if not isinstance(value, dict):
        raise HardwareError(f"hardware profile field {where} must be a mapping by name, got "
                            f"{value!r}")
    table = dict(old)
    for name, sub in value.items():
        if not isinstance(sub, dict):
            raise HardwareError(f"hardware profile field {where}.{name} must be a mapping of "
                                f"{type(base).__name__} fields, got {sub!r}")
        table[str(name)] = override(table.get(str(name), base), sub, f"{where}.{name}.")
    return tuple(table.items())


# The names a (name, number) table of a profile may hold, where they are a closed set: a
# misspelt collective in collective_latency_s was kept and never read (its latency 0).
_TABLE_KEYS = {"collective_latency_s": tuple(c.kind for c in COLLECTIVES)}
_REPLACED_TABLES = ("efficiency_table",)


def _override_tuple(old: tuple, value: Any, where: str) -> tuple:
    """Tuples in specs are (name, number) tables or tuples of named dataclasses; a profile
    gives a mapping name -> number or name -> {field: value}."""
    if not isinstance(value, dict):
        raise HardwareError(f"hardware profile field {where} must be a mapping by name, got "
                            f"{value!r}")
    if old and dataclasses.is_dataclass(old[0]):
        by_name = {item.name: item for item in old}
        for name, sub in value.items():
            if name not in by_name:
                raise HardwareError(f"hardware profile field {where}.{name} must name one of "
                                    f"{', '.join(by_name)}, got {name!r}")
            if not isinstance(sub, dict):
                raise HardwareError(f"hardware profile field {where}.{name} must be a mapping, "
                                    f"got {sub!r}")
            by_name[name] = override(by_name[name], sub, f"{where}.{name}.")
        return tuple(by_name.values())
    # a profile's efficiency table is a measured grid of its own: it replaces the base's
    # (merged, two grids of different axes would leave holes)
    table = {} if where.rsplit(".", 1)[-1] in _REPLACED_TABLES else dict(old)
    known = _TABLE_KEYS.get(where.rsplit(".", 1)[-1])
    for name, number in value.items():
        if known is not None and str(name) not in known:  # was priced as 0 without a word
            raise HardwareError(f"hardware profile field {where}.{name} must name one of "
                                f"{', '.join(known)}, got {name!r}; fix the profile")
        table[str(name)] = profile_value(f"{where}.{name}", where.rsplit(".", 1)[-1], number)
    return tuple(table.items())
