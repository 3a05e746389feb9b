"""Hardware: the public door to the specs (`cost_model.specs`: GPU, Link, NCCL constants,
Fabric, Cluster), the presets (`cost_model.presets`) and profile loading
(`cost_model.profiles`). Callers import from here; each module holds one responsibility.

Every figure carries its source in a comment where it is defined. A profile file (JSON or
YAML) replaces any field of a preset:

    {"base": "h200x4", "gpu": {"hbm_bandwidth_Bps": 3.9e12}, "nvlink": {"latency_s": 1e-6}}
"""

from __future__ import annotations

from cost_model.presets import (
                                H200_NCCL,
                                MACHINE_PRESETS,
                                NDR_RAIL_FABRIC,
                                NIC_400G,
                                PRESETS,
                                preset,
)
from cost_model.profiles import load_hardware, load_profile, override, profile_cluster
from cost_model.specs import (
                                F16_KERNEL_CLASSES,
                                FABRIC_KINDS,
                                GPU,
                                NCCL_DTYPES,
                                TRANSPORTS,
                                Cluster,
                                Fabric,
                                Link,
                                NcclTuning,
                                Protocol,
)
from workbench.errors import HardwareError

__all__ = ["F16_KERNEL_CLASSES", "FABRIC_KINDS", "GPU", "H200_NCCL", "MACHINE_PRESETS",
           "NCCL_DTYPES", "NDR_RAIL_FABRIC", "NIC_400G", "PRESETS", "TRANSPORTS", "Cluster",
           "Fabric", "HardwareError", "Link", "NcclTuning", "Protocol", "load_hardware",
           "load_profile", "override", "preset", "profile_cluster"]
