"""Measured microbenchmarks -> a hardware profile (the CPU half of `workbench calibrate`).

`workbench calibrate --gpus P` measures on the GPUs (workbench/runtime/calibrate.py) and writes a
raw
file; this package reads it (`raw`), fits the model's constants (`nccl` for the collectives,
`fits` for the rest, `profile` for all of them together into one profile) and writes the
profile with a report of the fit errors (`report`) that `load_hardware` (and so
`workbench simulate --hardware profile.json`) reads. `synthetic` makes a raw file from the
model, for tests and dry runs. Field by field:

| profile field | from |
|---|---|
| gpu.hbm_bandwidth_Bps | triad a = b + 0.5 c over 1 GiB (3 streams, like elementwise kernels) |
| gpu.hbm_read/write_bandwidth_Bps | one kernel streaming k arrays (n_in read, n_out written, |
| | k = 2..9, 1 GiB): least squares of time = read / R + written / W (`fit_hbm_read_write`) |
| gpu.launch_latency_s | back-to-back tiny kernels launched eagerly from Python, per kernel |
| gpu.peak_flops | 8192^3 torch.matmul per dtype (f32 with TF32 off) |
| gpu.sm_count, hbm_capacity_bytes, name | the device's properties |
| gpu.hbm_f16_kernel_Bps | mixed f16/f32 stream kernels (`device.streams_f16`): the byte |
| | classes of kernels with 2-byte arrays that stream at rates of their own, only those the |
| | data needs (`fit_hbm_f16_kernels`) |
| nccl.* | `nccl.fit_nccl` on the measured all_reduce/reduce_scatter/all_gather table (f32) |
| nccl_dtypes.f16, .bf16 | the same collectives in f16 and bf16 (`collectives_by_dtype`): their |
| | bandwidth constants (`nccl.fit_nccl_bandwidth`), the latencies f32's; only when measured |
| peer_load/store_bandwidth_Bps | the fused AllReduce kernel (studies/allreduce.py, no |
| | computation) across sizes, inverted through the model of its time |
| fused_fixed_s | the same rows: the fixed cost beyond launch gap and barrier hops (`fit_fused`) |
| nccl.host_overhead_s | the fit's (torch.distributed timed the tables), moved by the measured |
| | host cost per call of nccl4py (the runtime's) less torch's (`host_issue`; `_runtime_host`) |
| p2p_latency_s, p2p_bandwidth_Bps | NCCL send/recv from each GPU of the first half to the same |
| | one of the second half, 64 KiB .. 1 GiB (`p2p`): least squares of the relative error of |
| | host + latency + nbytes / bandwidth (`fit_p2p`), disturbed sizes left out (`p2p_kept`) |
| fused_block_bandwidth | the same kernel at 256 MiB with grids of 4 .. 2 x SMs blocks |
| | (`fused_blocks`): its bandwidth as a fraction of the full grid's (`fit_fused_blocks`) |
| fused_unroll_bandwidth | the same kernel at 256 MiB on its full grid generated at unroll 1, 2, 4 |
| | (`fused_unroll`): its bandwidth as a factor on unroll 1's (`fit_fused_unrolls`, note 95) |
| copy_engine_bandwidth_Bps | every GPU pushing 256 MiB and 1 GiB into each other GPU's |
| | CUDA-IPC-mapped buffer by copy engines (cuMemcpyDtoDAsync), all at once (`copy_engines`): |
| | least squares of the relative error of time = bytes per GPU per direction / bandwidth |
| | (`fit_copy_engines`) |
| gpu.dropout_element_s | the generated f16 bias + residual kernel on 8192 x 12288 with and |
| | without a dropout (studies/elementwise_ops.py, `dropout`): the difference per |
| | element (`fit_dropout`) |

What is not measured stays the base preset's (NVLink datasheet bandwidth, NIC, channels). Raw
files written before a section existed (e.g. records/calibration/h200x2) still fit:
each section is optional, and a missing one leaves its fields as the base preset has them.
"""

from cost_model.calibration.fits import (
    BANDWIDTH_BOUND_FACTOR,
    F16_RATE_TOLERANCE,
    P2P_BANDWIDTH_BOUND_FACTOR,
    copy_engine_errors,
    f16_stream_bytes,
    f16_stream_errors,
    fit_copy_engines,
    fit_dropout,
    fit_fused,
    fit_fused_blocks,
    fit_fused_unrolls,
    fit_hbm_f16_kernels,
    fit_hbm_read_write,
    fit_p2p,
    fit_peer_scale,
    fused_allreduce_time,
    fused_block_errors,
    fused_unroll_errors,
    hbm_stream_errors,
    p2p_errors,
    p2p_kept,
)
from cost_model.calibration.nccl import (
    KINDS,
    NcclFit,
    Table,
    fit_nccl,
    fit_nccl_bandwidth,
    read_table,
    table_errors,
)
from cost_model.calibration.profile import Calibration, HbmF16Fit, fit
from cost_model.calibration.raw import (
    COPY_ENGINE_NBYTES,
    F16_STREAM_KEYS,
    F16_STREAM_SHAPES,
    FIX,
    FUSED_BLOCKS_NBYTES,
    OUTLIER_FACTOR,
    STREAM_SHAPES,
    collective_rows,
    copy_engine_rows,
    fused_block_counts,
    nccl_outliers,
    nccl_table,
    p2p_rows,
    read_raw,
)
from cost_model.calibration.report import fit_report, write
from cost_model.calibration.synthetic import synthetic_raw

__all__ = [
    "BANDWIDTH_BOUND_FACTOR", "COPY_ENGINE_NBYTES", "F16_RATE_TOLERANCE", "F16_STREAM_KEYS",
    "F16_STREAM_SHAPES", "FIX", "FUSED_BLOCKS_NBYTES", "KINDS", "OUTLIER_FACTOR",
    "P2P_BANDWIDTH_BOUND_FACTOR", "STREAM_SHAPES", "Calibration", "HbmF16Fit", "NcclFit",
    "Table", "collective_rows", "copy_engine_errors", "copy_engine_rows", "f16_stream_bytes",
    "f16_stream_errors", "fit", "fit_copy_engines", "fit_dropout", "fit_fused",
    "fit_fused_blocks", "fit_fused_unrolls", "fit_hbm_f16_kernels", "fit_hbm_read_write",
    "fit_nccl", "fit_nccl_bandwidth", "fit_p2p", "fit_peer_scale", "fit_report",
    "fused_allreduce_time", "fused_block_counts", "fused_block_errors", "fused_unroll_errors",
    "hbm_stream_errors", "nccl_outliers", "nccl_table", "p2p_errors", "p2p_kept", "p2p_rows",
    "read_raw", "read_table", "synthetic_raw", "table_errors", "write",
]
