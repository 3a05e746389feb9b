"""Two prices the 2x H200 pipeline run (GPU run 9, one rank per stage) corrected: a collective
over a group of one rank copies its buffer unless it runs in place, and a fused Send moves
its bytes by peer stores. Checked on the model and on the simulator."""

import dataclasses

import pytest
from plan_priced import kernel_steps

from codegen.lower import lower
from codegen.plan import NcclStep
from codegen.work import step_work
from cost_model.hardware import preset
from cost_model.ops import fused_latency_s, fused_link_s
from cost_model.plan_cost import PlanContext, copies, copy_work, fused_parts_of, leaf_steps
from cost_model.plan_cost import plan_cost as price
from simulator import simulate
from workbench.cli.simulate import candidates
from workbench.interpreter import bind_sizes
from workbench.loader import load

SIZES = {"T": 2048, "H": 12288}
COPY_BYTES = 2 * 2048 * 12288 * 2  # read and write T x H f16


def _schedules(path):
    return dict(candidates(load(path)))


def _plan(program, P, cluster=None, sizes=SIZES):
    """The PlanContext of `program` lowered for P ranks, on 2-GPU nodes of h200x4 by default."""
    cluster = cluster or dataclasses.replace(preset("h200x4"), gpus_per_node=2)
    bound = bind_sizes(program, {**sizes, "P": P})
    return PlanContext.of(lower(program, P), cluster, bound)


def _nccl(pc, stmt):
    """The NCCL step lowered from statement `stmt`."""
    return next(s for top in pc.plan.steps for s in leaf_steps(top)
                if isinstance(s, NcclStep) and s.stmt == stmt)


def _cost(pc, stmt):
    """(seconds, its bottleneck) of a statement's steps, priced from the plan."""
    cost = price(pc.plan, pc.ctx.cluster, pc.ctx.bound)
    (c,) = [c for c, n in zip(cost.stmts, cost.names) if n == stmt]
    return c


def _live_input_allreduce():
    """y is read again after its AllReduce: the reduction needs a fresh buffer."""
    from workbench import AllReduce, Compute, Local, Program, Size, Sum, Tensor, float16

    T, H = Size("T"), Size("H")
    y = Tensor(float16, [T, H], Local, "y")
    summed = AllReduce(Sum, y)
    return Program(inputs=[y], outputs=[Compute(summed + y, name="z")], name="live")


def test_a_one_rank_allreduce_costs_a_copy_only_when_it_cannot_run_in_place():
    # the pipeline's gradient-like partial sums die at their AllReduce: reduced in place, as
    # the generated code does (GPU run 15: 0.013 ms for 201 MB on one rank; a copy is 0.1 ms)
    one = _plan(_schedules("studies/pipeline.py")["unscheduled"], 1)
    assert not copies(_nccl(one, "summed"))
    assert _cost(one, "summed").time_s == pytest.approx(one.ctx.cluster.nccl.host_overhead_s)
    # y read after its AllReduce: NCCL copies it on one rank, on two it moves it over the link
    live = _live_input_allreduce()
    one, two = _plan(live, 1), _plan(live, 2)
    name = live.stmts[0].name
    assert copies(_nccl(one, name)) and copy_work(one, _nccl(one, name)).hbm_bytes == COPY_BYTES
    assert "hbm" not in _cost(two, name).busy_s
    cost = _cost(one, name)
    c = one.ctx.cluster
    assert cost.time_s == pytest.approx(c.nccl.host_overhead_s + c.gpu.launch_latency_s
                                        + c.gpu.hbm_time_s(COPY_BYTES, COPY_BYTES / 2))
    assert cost.bottleneck == "hbm"


def test_the_model_and_the_generated_code_agree_on_which_allreduce_runs_in_place():
    for path in ("studies/pipeline.py", "studies/adam.py", "studies/sgd.py"):
        for name, program in _schedules(path).items():
            if name == "fuse-rs-c-ag-ring":
                continue  # simulated only: lowering refuses it (test_ring_fuse.py)
            by_stmt = {s.stmt: s for s in lower(program, 2).steps if isinstance(s, NcclStep)}
            for leaf in program.leaves():
                if type(leaf.op).__name__ == "AllReduce" and leaf.out.name in by_stmt:
                    step = by_stmt[leaf.out.name]
                    assert (step.src == step.dst) == program.dead_after(leaf.op.x, leaf), \
                        (path, name, leaf.out.name)
    live = _live_input_allreduce()
    (step,) = [s for s in lower(live, 2).steps if isinstance(s, NcclStep)]
    assert step.src != step.dst and not live.dead_after("y", live.stmts[0])


def test_an_allgather_of_an_updates_slice_runs_in_place_even_on_one_rank():
    adam = _schedules("studies/adam.py")["rs-c-ag-sliced-state"]
    gathers = [s for s in adam.stmts if type(s.op).__name__ == "AllGather"]
    assert gathers
    pc = _plan(adam, 1, preset("h200x4"), {"N": 2**20})
    assert not any(copies(_nccl(pc, s.name)) for s in gathers)
    # the pipeline's AllGather of what the Send received gathers into a fresh buffer: a copy
    pipe = _plan(_schedules("studies/pipeline.py")["rs-c-send-ag"], 1)
    assert copies(_nccl(pipe, "out"))


def test_the_simulator_adds_the_copy_where_the_model_does():
    program = _schedules("studies/pipeline.py")["rs-c-send-ag"]
    cluster = dataclasses.replace(preset("h200x4"), gpus_per_node=2)
    one = simulate(program, cluster, bind_sizes(program, {**SIZES, "P": 1}))
    copies = one.dataframe().query("resource == 'hbm' and op.str.contains('Gather|Scatter')")
    # the ReduceScatter's and the AllGather's copies, on the GPU of each stage that runs them
    assert len(copies) == 2
    per_copy = cluster.gpu.hbm_time_s(COPY_BYTES, COPY_BYTES / 2)
    assert (copies.t_end - copies.t_start).tolist() == pytest.approx([per_copy] * 2)


def test_a_fused_send_moves_its_bytes_at_the_peer_store_bandwidth():
    program = _schedules("studies/pipeline.py")["fuse-rs-c-send-ag"]
    pc = _plan(program, 1)
    (send,) = kernel_steps(pc.plan, "send")
    parts = fused_parts_of(pc, send)
    assert parts.send_nbytes == COPY_BYTES / 2
    assert fused_link_s(pc.ctx, parts) == pytest.approx(
        parts.send_nbytes / pc.ctx.cluster.peer_store_bandwidth_Bps)


def test_a_one_rank_fused_collective_pays_no_cross_gpu_barrier():
    # 2x H200 GPU run 12 (one GPU per stage): fuse-rs-c-send-ag measured 0.103 ms at T=1024,
    # which the 2-GPU fused kernel's fixed cost (17 us) priced 12 % slow (0.115 ms)
    program = _schedules("studies/pipeline.py")["fuse-rs-c-send-ag"]
    base = dataclasses.replace(preset("h200x4"), gpus_per_node=2)
    slow_barrier = dataclasses.replace(base, fused_fixed_s=1e-3)

    def latency(P):
        pc = _plan(program, P, slow_barrier)
        (send,) = kernel_steps(pc.plan, "send")
        return fused_latency_s(pc.ctx, None, fused_parts_of(pc, send))

    c = slow_barrier
    assert latency(1) == pytest.approx(c.gpu.launch_latency_s + c.nvlink.latency_s)
    # two ranks per stage: the reduce-scatter reads the peer, behind the kernel's barriers
    assert latency(2) > 1e-3


def test_an_update_on_a_slice_reads_only_that_slice_of_a_replicated_operand():
    # GPU run 14 (per-step times): Adam rs-c-ag's m1_s took 0.388 ms, the bytes of the slice;
    # priced at the whole replicated m it was 0.551 ms. A broadcast bias stays whole.
    def hbm_bytes(pc, stmt):
        (kernel,) = [k for k in kernel_steps(pc.plan) if k.stmts == (stmt,)]
        w = step_work(kernel, pc.plan.P, pc.numel)
        return (w.read_bytes + w.write_bytes).subs(pc.ctx.bound)

    N, P = 2**20, 2
    adam = _plan(_schedules("studies/adam.py")["rs-c-ag"], P, preset("h200x4"), {"N": N})
    # m's slice, g1_rs, m1_s; the scalar beta1
    assert hbm_bytes(adam, "m1_s") == 3 * (N // P) * 4 + 4
    layer = _plan(_schedules("studies/model_parallel.py")["unscheduled"], 2)
    T, H = SIZES["T"], SIZES["H"]
    assert hbm_bytes(layer, "out") == (3 * T * H + H) * 2  # summed, r, out; b
