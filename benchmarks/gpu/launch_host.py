"""Host time per kernel launch from PyTorch (decision 105: `GPU.host_launch_s`, cited at
5 us in the presets, not yet measured by this project), and what CUDA graphs leave of it.

Launches `N` tiny elementwise kernels (torch.add on 256 floats: the GPU finishes each long
before the host issues the next) and times the host's issue loop with perf_counter, the
median of repeats: eager launches, then the same kernels captured in one CUDA graph and
replayed. Writes {"eager_launch_s", "graph_replay_s", "graph_per_kernel_s", ...} to OUT.json.

    PYTHONPATH=. python3 benchmarks/gpu/launch_host.py OUT.json     (on a machine with a GPU)
"""

import json
import statistics
import sys
import time

from workbench.files import write_atomic  # run from the repo root (PYTHONPATH)

N = 2000  # kernels per timed loop
REPEATS = 7


def host_loop_s(torch, fn, repeats: int = REPEATS) -> float:
    """Median host seconds of fn() (the GPU drained before each)."""
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(out: str) -> None:
    import torch

    x = torch.zeros(256, device="cuda")

    def eager():
        for _ in range(N):
            x.add_(1.0)

    eager()  # warm up the allocator and the kernel cache
    eager_s = host_loop_s(torch, eager) / N
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        eager()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(graph):
        eager()
    graph.replay()
    replay_s = host_loop_s(torch, graph.replay)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "kernels": N, "eager_launch_s": eager_s, "graph_replay_s": replay_s,
           "graph_per_kernel_s": replay_s / N}
    print(json.dumps(res, indent=1))
    write_atomic(out, json.dumps(res, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
