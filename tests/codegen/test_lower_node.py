"""Lowering a hierarchical split (design note 36): a node's view, its NCCL call across nodes,
the faults that name what is not generated; the golden cases compute what the original does."""

import pytest
from codegen_cases import CASES, case_program, hierarchical_program
from conftest import load_study

from codegen.lower import lower
from codegen.plan import KernelStep, NcclStep
from workbench.errors import RuntimeFault
from workbench.interpreter import RTOL, compare_programs
from workbench.transforms import HierarchicalSplit, Split

HIER = [c for c in CASES if "-hier-" in c[0]]


@pytest.mark.parametrize("case", HIER, ids=[c[0] for c in HIER])
def test_hierarchical_cases_compute_the_original(case):
    program = case_program(case)
    original = load_study(case[1]).program
    P = case[3]
    for name, err, tol in compare_programs(original, program, {"N": P * 3, "P": P}, seed=1):
        # f16 gradients round once more (the node's partial sum), see test_hierarchical.py
        assert err <= max(tol, RTOL["f16"] if "mixed" in case[0] else tol), (name, err)


def test_node_view_plan():
    plan = lower(case_program(HIER[0]), P=8)
    assert (plan.P, plan.per_node, plan.nodes) == (4, 4, 2)
    nccl = [s for s in plan.steps if isinstance(s, NcclStep)]
    assert [(s.op, s.comm) for s in nccl] == [("reduce_scatter", "group"),
                                              ("all_reduce", "inter")]
    assert str(nccl[1].count) == "N/4"  # the slice, not the whole tensor
    (kernel,) = [s for s in plan.steps if isinstance(s, KernelStep)]
    assert "FusedAllgather" in kernel.spec.name or kernel.spec.name.startswith("wb_collective_p4")


def test_node_view_faults_name_the_problem():
    program = load_study("studies/adam.py").program
    with pytest.raises(RuntimeFault, match="must be a multiple of the 4 GPUs per node"):
        lower(hierarchical_program(program, "hier-fuse:4"), P=6)
    from workbench import AllReduce, Local, P, Program, Size, Sum, Tensor, float32

    N = Size("N", multiple_of=P)
    a, b = Tensor(float32, [N], Local, "a"), Tensor(float32, [N], Local, "b")
    two = Program(inputs=[a, b], outputs=[AllReduce(Sum, a, name="ra"),
                                          AllReduce(Sum, b, name="rb")], name="two")
    with pytest.raises(RuntimeFault, match=r"must have no other collectives and one node size, "
                                           r"got node sizes \[4\] and collectives over the "
                                           r"whole group \['rb'\]"):
        lower(HierarchicalSplit("ra", 4).apply(two), P=8)
    node = HierarchicalSplit("g1", 4).apply(load_study("studies/sgd.py").program)
    assert lower(node, P=8).per_node == 4
    assert lower(Split("g1").apply(load_study("studies/sgd.py").program), P=8).per_node == 0
