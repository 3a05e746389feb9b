"""The pipelined hierarchical schedule of data-parallel Adam (transforms.PipelineHierarchy,
design note 71) as named schedules, for runs on GPUs: the autotuner proposes it per cluster
and size in `workbench simulate --autotune`; here the node size is a parameter of the file.

`PER_NODE` GPUs per node (1: one GPU is a node, so `compile-and-measure --gpus 1` checks
every leg at P = 1; with several GPUs each is a node whose boundary a split communicator
emulates). Schedules:

    pipelined-c4             node ReduceScatter, AllReduce across nodes, the Adam update fused
                             with the node gather, 4 chunks; moments kept on node slices
    pipelined-replicated-c4  the same with the moments gathered too (replicated state)
"""

from studies.adam import build
from workbench import schedule

PER_NODE = 1
sizes = {"N": 2**20}

program, _ = build()
g1 = program.stmts[0].out.name  # the gradient AllReduce
UPDATES = ("m1", "v1", "w1")


@schedule(program, "pipelined-c4")
def pipelined(s):
    """Hierarchical split, the update on node slices fused with the node gather, 4 chunks."""
    _, ar, ag = s.hierarchical_split(g1, PER_NODE)
    sliced = s.reorder(*UPDATES, before=ag)
    s.as_slice("m", "v")
    s.fuse(*sliced, "w1")
    s.pipeline_hierarchy(ar, chunks=4)


@schedule(program, "pipelined-replicated-c4")
def pipelined_replicated(s):
    """pipelined-c4 with the moments gathered as well (no state kept on slices)."""
    _, ar, ag = s.hierarchical_split(g1, PER_NODE)
    sliced = s.reorder(*UPDATES, before=ag)
    s.fuse(*sliced, *UPDATES)
    s.pipeline_hierarchy(ar, chunks=4)


schedules = [pipelined, pipelined_replicated]
