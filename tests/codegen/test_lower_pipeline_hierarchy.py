"""Codegen of the pipelined hierarchy (codegen.lower_pipeline): one PipelineStep whose legs
are NCCL on the node's communicator, NCCL on the rail's ("inter"), and the chunked fused
update + gather; the runtime's chunk addressing (NCCL's chunked calls, the kernel's chunk
offsets, node_part for inputs and checks) agrees on where chunk c of every value lives, which
is checked here in numpy; and on a GPU (marked gpu) every leg checks at P = 1."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from conftest import gpu_count

from codegen.lower import lower
from codegen.plan import KernelStep, NcclStep, PipelineStep
from codegen.render import render
from workbench.runtime.chunked import nccl_chunk
from workbench.runtime.pipeline_run import node_part
from workbench.types import WORLD, NodeSliced, TensorType, as_shape, float32

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "tph", ROOT / "tests" / "workbench" / "test_pipeline_hierarchy.py")
_tph = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tph)


@pytest.mark.parametrize("per_node,P", [(1, 1), (2, 4), (8, 16)])
def test_the_pipeline_lowers_to_three_legs_on_the_node_and_rail_communicators(per_node, P):
    _, program = _tph.pipelined("studies/adam.py", per_node, 4)
    plan = lower(program, P)
    assert (plan.per_node, plan.nodes, plan.slice_chunks) == (per_node, P // per_node, 4)
    (step,) = [s for s in plan.steps if isinstance(s, PipelineStep)]
    rs, ar, gather = step.legs
    assert isinstance(rs, NcclStep) and (rs.op, rs.comm) == ("reduce_scatter", "group")
    assert isinstance(ar, NcclStep) and (ar.op, ar.comm) == ("all_reduce", "inter")
    assert ar.src == ar.dst == rs.dst  # in place on the node slice
    assert isinstance(gather, KernelStep) and gather.spec in plan.kernels()
    source = render(gather.spec)
    assert "long long chunk" in source
    # the moments kept on node slices are read and written at chunk c's part of the slice
    assert "p_m + (((N * chunk)" in source


def test_the_replicated_state_pipeline_and_a_plain_gather_lower_too():
    _, program = _tph.pipelined("studies/adam.py", 2, 2, sliced_state=False)
    plan = lower(program, 4)
    assert any(isinstance(s, PipelineStep) for s in plan.steps)


@pytest.mark.parametrize("per_node,chunks", [(1, 4), (2, 2), (4, 4), (3, 2)])
def test_nccl_chunks_the_kernel_and_node_part_agree_on_where_chunk_c_lives(per_node, chunks):
    """Emulate leg 1 in numpy as the runtime calls NCCL (nccl_chunk's offsets): each rank's
    slice buffer must hold exactly node_part of the node's sum, the layout the fused kernel
    reads at chunk * E and the checks compare."""
    rng = np.random.default_rng(0)
    E = 5  # elements of one chunk of one rank's slice
    n = per_node * chunks * E
    grads = rng.standard_normal((per_node, n)).astype(np.float32)
    count = n // per_node  # reduce_scatter's receive count per rank
    slices = np.zeros((per_node, count), np.float32)
    for c in range(chunks):
        src, dst, part = nccl_chunk("reduce_scatter", 0, 0, count, "f32", c, chunks, per_node)
        src, dst = src // 4, dst // 4
        summed = grads[:, src:src + part * per_node].sum(axis=0)
        for rank in range(per_node):
            slices[rank, dst:dst + part] = summed[rank * part:(rank + 1) * part]
    t = TensorType(float32, as_shape([n]), NodeSliced(0, per_node), WORLD)
    for rank in range(per_node):
        want = node_part(grads.sum(axis=0), t, rank, per_node, chunks)
        np.testing.assert_array_equal(slices[rank], want)
        # and whole-tensor element of chunk c, local rank l, e is (c * per_node + l) * E + e
        c, e = chunks - 1, E - 1
        assert want[c * E + e] == grads.sum(axis=0)[(c * per_node + rank) * E + e]


def _pipelined_rows(P: int, N: int) -> list:
    """Both pipelined schedules run on P GPUs, checked against the interpreter."""
    from workbench.runtime.job import run_job

    res = run_job([str(ROOT / "studies/pipeline_hierarchy.py")], P, [{"N": N}],
                  "pipelined-c4,pipelined-replicated-c4", 20, 2, False, 120.0)
    rows = [r for r in res["records"] if r["kind"] == "workbench"
            and r["schedule"].startswith("pipelined")]
    assert len(rows) == 2
    for r in rows:
        assert r["check"].startswith("ok"), (r["schedule"], r["check"])
    return rows


@pytest.mark.gpu
def test_every_leg_checks_at_one_gpu():
    assert gpu_count() >= 1
    _pipelined_rows(1, 3 * 2**16)


@pytest.mark.gpu(2)
def test_every_leg_checks_on_two_gpus_as_two_nodes():
    """Two GPUs, each its own "node" (PER_NODE = 1): the node legs run on one-rank node
    communicators and the cross-node AllReduce on the rail communicator of both, split from
    the world by ncclCommSplit: the split communicator stands in for the network."""
    for r in _pipelined_rows(2, 2 * 3 * 2**16):
        assert r["P"] == 2 and r["median_ms"] > 0
