"""The pipelined hierarchical schedule (transforms.PipelineHierarchy): the three legs of a
hierarchical split chunk by chunk. Original and pipelined programs agree in the reference
interpreter for random nodes, GPUs per node, sizes and chunk counts; illegal cases and the
verifier's chunk check are pinned."""

import pytest
from conftest import load_study
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import ir
from workbench.errors import IllegalTransform
from workbench.interpreter import RTOL, assert_equivalent, compare_programs
from workbench.placement import Placement
from workbench.scheduling import Scheduler
from workbench.transforms import HierarchicalSplit, PipelineHierarchy, transform_from_json
from workbench.verify import verify

UPDATES = {"studies/sgd.py": ["w1"], "studies/adam.py": ["m1", "v1", "w1"],
           "studies/adam.py:mixed": ["m1", "v1", "w1", "w16"]}
STATE = {"studies/sgd.py": [], "studies/adam.py": ["m", "v"],
         "studies/adam.py:mixed": ["m", "v", "w"]}
GATHERED = {"studies/sgd.py": ["w1"], "studies/adam.py": ["w1"], "studies/adam.py:mixed": ["w16"]}


def pipelined(spec, per_node, chunks, sliced_state=True):
    """hierarchical split, the update on node slices fused with the node gather, pipelined."""
    f = load_study(spec)
    s = Scheduler(f.program)
    _, ar, ag = s.hierarchical_split("g1", per_node)
    sliced = s.reorder(*UPDATES[spec], before=ag)
    gathered = GATHERED[spec]
    if sliced_state and STATE[spec]:
        s.as_slice(*STATE[spec])
    else:
        gathered = UPDATES[spec]
    s.fuse(*sliced, *gathered)
    s.pipeline_hierarchy(ar, chunks)
    return f.program, s.program


@settings(max_examples=30, deadline=None)
@given(per_node=st.integers(1, 4), nodes=st.integers(1, 3), chunks=st.sampled_from([2, 3, 4]),
       k=st.integers(1, 2), seed=st.integers(0, 999), sliced_state=st.booleans(),
       spec=st.sampled_from(sorted(UPDATES)))
def test_the_pipelined_hierarchy_is_equivalent(per_node, nodes, chunks, k, seed,
                                               sliced_state, spec):
    before, after = pipelined(spec, per_node, chunks, sliced_state)
    P = per_node * nodes
    sizes = {"N": P * chunks * k, "P": P}
    if spec.endswith("mixed"):  # f16 partial sums between the legs (design note 35)
        for name, err, _ in compare_programs(before, after, sizes, seed):
            assert err <= RTOL["f16"], (name, err)
    else:
        assert_equivalent(before, after, sizes, seed)


def test_the_region_holds_the_three_legs_in_order():
    _, after = pipelined("studies/adam.py", 8, 4)
    (region,) = [s for s in after.stmts if isinstance(s.op, ir.Overlapped)]
    rs, ar, gather = region.op.body
    assert region.op.chunks == 4
    assert (rs.op.sub.axis, ar.op.sub.axis) == ("intra", "inter")
    assert isinstance(gather.op, ir.Fused) and gather.op.kind == "allgather"


def test_illegal_pipelines_are_refused_and_messages_are_pinned():
    f = load_study("studies/adam.py")
    assert PipelineHierarchy("g1", 4).check(f.program).reason == (
        "pipeline-hierarchy(g1, chunks=4): 'g1' must be the AllReduce across nodes of a "
        "hierarchical split, got AllReduce(Sum, g); apply hierarchical_split first and pass "
        "its second name")
    h = HierarchicalSplit("g1", 8).apply(f.program)
    assert PipelineHierarchy("g1_ar", 1).check(h).reason == (
        "pipeline-hierarchy(g1_ar, chunks=1): chunks must be an int >= 2 (pieces of each "
        "rank's node slice), got 1; e.g. chunks=4")
    assert PipelineHierarchy("g1_ar", 4).check(h)  # the plain node AllGather: legal
    # the update moved onto the slices but not fused with the gather: it reads g1_ar
    from workbench.transforms import Reorder
    r = Reorder(("m1", "v1", "w1"), "g1").apply(h)
    reason = PipelineHierarchy("g1_ar", 4).check(r).reason
    assert reason.startswith("pipeline-hierarchy(g1_ar, chunks=4): the statement after 'g1_ar' "
                             "must be the node AllGather that reads it")
    # a plain AllGather right after the AllReduce (no update between) pipelines
    allreduce = load_study("studies/allreduce.py")
    hs = HierarchicalSplit(allreduce.program.stmts[0].out.name, 2).apply(allreduce.program)
    ar_name = hs.stmts[1].out.name
    assert PipelineHierarchy(ar_name, 2).check(hs)


def test_a_chunk_count_that_does_not_divide_the_slice_is_refused_naming_chunks():
    _, after = pipelined("studies/adam.py", 8, 3)
    placement = Placement.of("dgx-h100", 2, 8, {"N": 2**20, "P": 16})
    with pytest.raises(IllegalTransform, match=(
            r"^pipeline-hierarchy\(g1_ar\): chunks must divide a rank's node slice of 131072 "
            r"elements, got chunks=3; pick chunks from \[2, 4, 8, 16, 32, 64\] or a size that "
            r"3 divides")):
        verify(after, placement)
    _, ok = pipelined("studies/adam.py", 8, 4)
    verify(ok, placement)


def test_the_pipeline_round_trips_through_json():
    t = PipelineHierarchy("g1_ar", 8)
    assert transform_from_json(t.to_json()) == t
