"""The MoE overlaps' rotated exchange without GPUs (design note 79): an AllToAll chunked as
NCCL send/recv pieces, each rank taking the row chunks in its own rotated order. Simulated on
numpy ranks for many P and chunk counts: every step's pieces match pairwise, the chunk a GEMM
reads after step i (dispatch) is complete, and the result is the AllToAll's; the runtime's
dispatch (PlanRun.nccl -> Gpu.exchange -> one NCCL group call) with fakes."""

from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.lower import lower
from codegen.plan import GemmStep, NcclStep, OverlapStep
from workbench.errors import RuntimeFault
from workbench.interpreter import random_inputs, run
from workbench.loader import load
from workbench.runtime.chunked import exchange_order, exchange_pieces, overlap_order
from workbench.runtime.comm import Nccl4py
from workbench.runtime.executor import PlanRun


def _simulate(side, P, C, count):
    x = [np.arange(count) + 1000 * r for r in range(P)]
    d = [np.full(count, -1) for _ in range(P)]
    E, B = count // C, count // P
    for i in range(C):
        sent = {}
        steps = {r: exchange_pieces(side, i, C, P, r, count) for r in range(P)}
        for r, pieces in steps.items():
            for kind, peer, so, do, n in pieces:
                if kind == "copy":
                    d[r][do:do + n] = x[r][so:so + n]
                elif kind == "send":
                    assert (r, peer) not in sent  # one send per pair and step
                    sent[(r, peer)] = x[r][so:so + n]
                    if side == "send":  # only rows of this step's chunk, GEMM'd already
                        j = exchange_order(r, C, P)[i]
                        assert j * E <= so and so + n <= (j + 1) * E
        for r, pieces in steps.items():
            for kind, peer, _so, do, n in pieces:
                if kind == "recv":
                    data = sent.pop((peer, r))
                    assert len(data) == n
                    d[r][do:do + n] = data
        assert not sent  # every send has its recv
        if side == "recv":  # the GEMM's rows of step i have all arrived
            for r in range(P):
                j = exchange_order(r, C, P)[i]
                assert (d[r][j * E:(j + 1) * E] >= 0).all()
    for r in range(P):
        for s in range(P):
            np.testing.assert_array_equal(d[r][s * B:(s + 1) * B], x[s][r * B:(r + 1) * B])


@pytest.mark.parametrize("side", ["recv", "send"])
@pytest.mark.parametrize("P", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("C", [1, 2, 3, 4, 8, 12])
def test_every_step_matches_and_the_result_is_the_alltoall(side, P, C):
    for k in (1, 2, 3):
        _simulate(side, P, C, P * C * k)


def test_each_step_loads_every_link_when_chunks_are_the_ranks():
    # C = P: at step i rank r receives one block, from rank (r + i) mod P, and sends one
    P = 4
    for i in range(P):
        for r in range(P):
            pieces = exchange_pieces("recv", i, P, P, r, 4 * P)
            kinds = sorted(k for k, *_ in pieces)
            assert kinds == (["copy"] if i == 0 else ["recv", "send"])
            if i:
                (peer,) = {p for k, p, *_ in pieces if k == "recv"}
                assert peer == (r + i) % P


def test_uneven_pieces_are_refused():
    with pytest.raises(RuntimeFault, match=r"a rotated exchange of 10 elements per rank must "
                                           r"split into 4 blocks and 2 chunks evenly"):
        exchange_pieces("recv", 0, 2, 4, 0, 10)


def test_the_moe_overlaps_lower_to_a_rotated_exchange_beside_the_gemm():
    pf = load("studies/moe.py")
    plan = lower(pf.schedules["overlap-both"].apply(), 4)
    a2a_mm, mm_a2a = [s for s in plan.steps if isinstance(s, OverlapStep)]
    assert isinstance(a2a_mm.producer, NcclStep) and a2a_mm.producer.exchange == "recv"
    assert isinstance(a2a_mm.consumer, GemmStep) and a2a_mm.consumer.stmt == "h1"
    assert isinstance(mm_a2a.producer, GemmStep) and mm_a2a.consumer.exchange == "send"
    assert overlap_order(a2a_mm, 3, 4) == [3, 0, 1, 2]
    plain = lower(load("studies/sequence_parallel.py").schedules["overlap-ag-mm"].apply(), 2)
    (step,) = [s for s in plain.steps if isinstance(s, OverlapStep)]
    assert overlap_order(step, 1, 2) == [0, 1, 2, 3]  # other overlaps keep their order


class _FakeGpu:
    def __init__(self):
        self.calls = []

    def exchange(self, pieces, dtype, stream):
        self.calls.append((pieces, dtype, stream))


def test_plan_run_enqueues_a_step_as_one_exchange():
    run = object.__new__(PlanRun)
    run.gpu, run.P, run.local = _FakeGpu(), 2, 1
    step = NcclStep("all_to_all", "", None, None, 8, "bf16", "d", exchange="recv")
    item = types.SimpleNamespace(step=step, src=0x1000, dst=0x2000, count=8)
    run.nccl(item, stream=7, chunk=1, chunks=2)
    ((pieces, dtype, stream),) = run.gpu.calls
    assert (dtype, stream) == ("bf16", 7)
    # rank 1 of 2, step 1: its chunk 0 of d (rows from rank 0): recv 4 elements (8 bytes) at
    # d + 0; it sends rank 0 rank 0's chunk 1 (rank 1's block of it): x + 0
    assert sorted(pieces) == [("recv", 0, 0x1000 + 8, 0x2000, 4),
                              ("send", 0, 0x1000, 0x2000 + 8, 4)]


class _Comm:
    def __init__(self):
        self.calls = []

    def send(self, buf, peer, stream=0):
        self.calls.append(("send", buf, peer, stream))

    def recv(self, buf, peer, stream=0):
        self.calls.append(("recv", buf, peer, stream))


def test_nccl4py_runs_a_step_as_one_group_call():
    nccl = object.__new__(Nccl4py)
    log = []
    nccl.nccl = types.SimpleNamespace(group_start=lambda: log.append("start"),
                                      group_end=lambda: log.append("end"))
    nccl.comm, nccl._views = _Comm(), {}
    nccl.view = lambda ptr, n, dtype: (ptr, n, dtype)
    nccl.exchange([("send", 1, 0x10, 0x20, 4), ("recv", 1, 0x30, 0x40, 4)], "bf16", 5)
    assert log == ["start", "end"]
    assert nccl.comm.calls == [("send", (0x10, 4, "bf16"), 1, 5),
                               ("recv", (0x40, 4, "bf16"), 1, 5)]


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.sampled_from([2, 3, 4]), st.integers(1, 2), st.integers(0, 2**16))
def test_the_overlapped_moe_means_what_the_program_says(p, chunks, k, seed):
    """The overlaps change time, not values: every MoE schedule against the program in the
    interpreter (the rows must split into the chunks: T = p * chunks * k)."""
    from studies.moe import build

    program, schedules = build(chunks=chunks)
    sizes = {"T": p * chunks * k, "H": 4, "F": 4, "P": p}
    inputs = random_inputs(program, sizes, seed)
    want = np.asarray(run(program, inputs, sizes)["out"], dtype=np.float32)
    for sched in schedules:
        got = np.asarray(run(sched.apply(), inputs, sizes)["out"], dtype=np.float32)
        np.testing.assert_array_equal(got, want, err_msg=sched.name)
