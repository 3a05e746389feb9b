"""Programs whose generated CUDA is golden-tested and compiled: (id, spec, schedule, P)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CASES = [
    ("sgd-unscheduled-p2", "studies/sgd.py", None, 2),
    ("sgd-fuse-rs-c-ag-p2", "studies/sgd.py", "fuse-rs-c-ag", 2),
    ("sgd-mixed-fuse-rs-c-ag-p2", "studies/sgd.py:mixed", "fuse-rs-c-ag", 2),
    ("adam-unscheduled-p2", "studies/adam.py", None, 2),
    ("adam-rs-c-ag-p2", "studies/adam.py", "rs-c-ag", 2),
    ("adam-fuse-rs-c-ag-p2", "studies/adam.py", "fuse-rs-c-ag", 2),
    ("adam-fuse-rs-c-ag-p4", "studies/adam.py", "fuse-rs-c-ag", 4),
    ("adam-mixed-fuse-rs-c-ag-p2", "studies/adam.py:mixed", "fuse-rs-c-ag", 2),
    ("allreduce-fused-p2", "studies/allreduce.py", "fused", 2),
    ("bias-dropout-broadcast-p2", "dropout", None, 2),
    ("adam-fuse-rs-c-ag-push-p2", "studies/adam.py", "fuse-rs-c-ag", 2),
    ("adam-mixed-fuse-rs-c-ag-push-p4", "studies/adam.py:mixed", "fuse-rs-c-ag", 4),
    ("lamb-unscheduled-p2", "studies/lamb.py", None, 2),
    ("lamb-rs-c-ag-p2", "studies/lamb.py", "rs-c-ag", 2),
    ("lamb-rs-c-ag-sliced-state-p2", "studies/lamb.py", "rs-c-ag-sliced-state", 2),
    ("lamb-fuse-rs-c-ag-p2", "studies/lamb.py", "fuse-rs-c-ag", 2),
    ("lamb-fuse-rs-c-ag-p4", "studies/lamb.py", "fuse-rs-c-ag", 4),
    ("lamb-mixed-fuse-rs-c-ag-p2", "studies/lamb.py:mixed", "fuse-rs-c-ag", 2),
    ("lamb-mixed-fuse-rs-c-ag-push-p2", "studies/lamb.py:mixed", "fuse-rs-c-ag", 2),
    ("adam-fuse-rs-c-ag-ce-p2", "studies/adam.py", "fuse-rs-c-ag-ce", 2),
    ("adam-mixed-fuse-rs-c-ag-ce-p4", "studies/adam.py:mixed", "fuse-rs-c-ag-ce", 4),
    ("sgd-fuse-rs-c-ag-ce-p2", "studies/sgd.py", "fuse-rs-c-ag-ce", 2),
    ("model-parallel-unscheduled-p2", "studies/model_parallel.py", None, 2),
    ("model-parallel-fuse-ar-c-p2", "studies/model_parallel.py", "fuse-ar-c", 2),
    ("model-parallel-overlap-mm-fuse-ar-c-p2", "studies/model_parallel.py",
     "overlap-mm-fuse-ar-c", 2),
    ("model-parallel-overlap-mm-fuse-ar-c-push-p4", "studies/model_parallel.py",
     "overlap-mm-fuse-ar-c", 4),
    ("pipeline-unscheduled-p2", "studies/pipeline.py", None, 2),
    ("pipeline-fuse-c-send-overlap-ar-p2", "studies/pipeline.py", "fuse-c-send-overlap-ar", 2),
    ("pipeline-rs-c-send-ag-p2", "studies/pipeline.py", "rs-c-send-ag", 2),
    ("pipeline-fuse-rs-c-send-ag-p2", "studies/pipeline.py", "fuse-rs-c-send-ag", 2),
    ("pipeline-fuse-rs-c-send-ag-push-p4", "studies/pipeline.py", "fuse-rs-c-send-ag", 4),
    ("pipeline-overlap-fuse-rs-c-send-ag-p2", "studies/pipeline.py",
     "overlap-fuse-rs-c-send-ag", 2),
    # Row kernels (axis reductions): AllReduce + residual + RMSNorm, and studies/rmsnorm.py
    ("allreduce-rmsnorm-unscheduled-p2", "studies/allreduce_rmsnorm.py", None, 2),
    ("allreduce-rmsnorm-rs-c-ag-p2", "studies/allreduce_rmsnorm.py", "rs-c-ag", 2),
    ("allreduce-rmsnorm-fuse-rs-c-ag-p1", "studies/allreduce_rmsnorm.py", "fuse-rs-c-ag", 1),
    ("allreduce-rmsnorm-fuse-rs-c-ag-p2", "studies/allreduce_rmsnorm.py", "fuse-rs-c-ag", 2),
    ("allreduce-rmsnorm-bf16-fuse-rs-c-ag-p4", "studies/allreduce_rmsnorm.py:bf16",
     "fuse-rs-c-ag", 4),
    # issue 25: the whole AllReduce fused with the epilogue (two-shot, one-shot, Lamport)
    ("allreduce-rmsnorm-fuse-ar-c-p1", "studies/allreduce_rmsnorm.py", "fuse-ar-c", 1),
    ("allreduce-rmsnorm-fuse-ar-c-p2", "studies/allreduce_rmsnorm.py", "fuse-ar-c", 2),
    # issue 35: two-shot's bytes with the epilogue beside the communication
    ("allreduce-rmsnorm-fuse-ar-c-pipelined-p1", "studies/allreduce_rmsnorm.py",
     "fuse-ar-c-pipelined", 1),
    ("allreduce-rmsnorm-bf16-fuse-ar-c-pipelined-p4", "studies/allreduce_rmsnorm.py:bf16",
     "fuse-ar-c-pipelined", 4),
    ("allreduce-rmsnorm-bf16-fuse-ar-c-oneshot-p2", "studies/allreduce_rmsnorm.py:bf16",
     "fuse-ar-c-oneshot", 2),
    ("allreduce-rmsnorm-fuse-ar-c-oneshot-p4", "studies/allreduce_rmsnorm.py",
     "fuse-ar-c-oneshot", 4),
    ("allreduce-rmsnorm-fuse-ar-c-lamport-p1", "studies/allreduce_rmsnorm.py",
     "fuse-ar-c-lamport", 1),
    ("allreduce-rmsnorm-bf16-fuse-ar-c-lamport-p2", "studies/allreduce_rmsnorm.py:bf16",
     "fuse-ar-c-lamport", 2),
    ("allreduce-rmsnorm-fuse-ar-c-lamport-p4", "studies/allreduce_rmsnorm.py",
     "fuse-ar-c-lamport", 4),
    ("rows-axis-f32-p1", "studies/rmsnorm.py:axis_f32", None, 1),
    ("rows-axis-bf16-fused-p1", "studies/rmsnorm.py:axis_bf16", "fused", 1),
    ("rows-rmsnorm-f32-fused-p1", "studies/rmsnorm.py:rmsnorm_f32", "fused", 1),
    ("rows-layernorm-f16-p1", "studies/rmsnorm.py:layernorm_f16", None, 1),
    ("rows-layernorm-f16-fused-p1", "studies/rmsnorm.py:layernorm_f16", "fused", 1),
    ("rows-softmax-bf16-fused-p1", "studies/rmsnorm.py:softmax_bf16", "fused", 1),
    ("rows-residual-f16-fused-p1", "studies/rmsnorm.py", "fused", 1),
    # The row cache kept as f32 and as bf16 (wb::RowCache, two 16-bit values per register).
    ("rows-residual-f32-fused-p1", "studies/rmsnorm.py:residual_f32", "fused", 1),
    ("rows-residual-bf16-fused-p1", "studies/rmsnorm.py:residual_bf16", "fused", 1),
    # The "rows" form (CodegenOptions.row_grid = "rows", design note 91): one row a block,
    # threads by the row's length; one rank (no barrier) and two (barriers kept).
    ("allreduce-rmsnorm-fuse-ar-c-oneshot-rowgrid-p1", "studies/allreduce_rmsnorm.py",
     "fuse-ar-c-oneshot", 1),
    ("allreduce-rmsnorm-bf16-fuse-ar-c-oneshot-rowgrid-p2", "studies/allreduce_rmsnorm.py:bf16",
     "fuse-ar-c-oneshot", 2),
    ("allreduce-rmsnorm-fuse-ar-c-rowgrid-p1", "studies/allreduce_rmsnorm.py", "fuse-ar-c", 1),
    ("allreduce-rmsnorm-fuse-ar-c-lamport-rowgrid-p1", "studies/allreduce_rmsnorm.py",
     "fuse-ar-c-lamport", 1),
    ("rows-residual-f16-fused-rowgrid-p1", "studies/rmsnorm.py", "fused", 1),
    # issue 15: where / comparisons / sizes as numbers, MatMul epilogues, Reduce, Broadcast
    ("where-sizes-p2", "studies/kernel_ops.py", None, 2),
    ("epilogue-erf-fuse-mm-epilogue-p2", "studies/kernel_ops.py:epilogue_erf_f16",
     "fuse-mm-epilogue", 2),
    ("mlp-fuse-mm-epilogue-p2", "studies/kernel_ops.py:mlp", "fuse-mm-epilogue", 2),
    ("broadcast-p2", "studies/kernel_ops.py:broadcast", None, 2),
    ("parameter-server-p2", "studies/parameter_server.py", None, 2),
    ("parameter-server-fuse-reduce-c-p2", "studies/parameter_server.py", "fuse-reduce-c", 2),
    ("parameter-server-fuse-c-broadcast-p4", "studies/parameter_server.py", "fuse-c-broadcast",
     4),
    ("parameter-server-fuse-reduce-c-broadcast-p2", "studies/parameter_server.py",
     "fuse-reduce-c-broadcast", 2),
    # issue 15's user programs written from the README: Adagrad, SGD-momentum + weight decay
    ("adagrad-fuse-rs-c-ag-p2", "studies/adagrad.py", "fuse-rs-c-ag", 2),
    ("sgd-momentum-wd-fuse-rs-c-ag-p2", "studies/sgd_momentum.py:sgd_momentum_wd",
     "fuse-rs-c-ag", 2),
    # hierarchical split (design notes 35, 36): 2 nodes of 4 GPUs, and of 8
    ("adam-hier-fuse-p8x2", "studies/adam.py", "hier-fuse:4", 8),
    ("adam-mixed-hier-fuse-p16x2", "studies/adam.py:mixed", "hier-fuse:8", 16),
    ("sgd-hier-rs-c-ag-p8x2", "studies/sgd.py", "hier-rs-c-ag:4", 8),
    # issue 24: what the DSL accepted and the backend refused, now generated
    ("amax-cast-fuse-rs-c-ag-p2", "tests/programs/users/amax_cast.py", "fuse-rs-c-ag", 2),
    ("prod-scale-fuse-rs-c-ag-p2", "tests/programs/users/prod_scale.py", "fuse-rs-c-ag", 2),
    ("grad-accum-bf16-fuse-cast-rs-p2", "tests/programs/users/grad_accum_bf16.py",
     "fuse-cast-rs", 2),
    ("moe-scaled-dispatch-fuse-both-p4", "tests/programs/users/moe_scaled_dispatch.py",
     "fuse-both", 4),
    ("weight-delta-p2", "tests/programs/users/weight_delta.py", None, 2),
    ("weight-delta-rs-c-ag-p2", "tests/programs/users/weight_delta.py", "rs-c-ag", 2),
    ("parameter-server-overlap-c-bcast-p4", "studies/parameter_server.py", "overlap-c-bcast", 4),
    ("tp-attn-out-ln-overlap-p2", "tests/programs/users/tp_attn_out_layernorm.py",
     "overlap-mm-fuse-rs-c-ag", 2),
    ("sequence-parallel-overlap-both-p2", "studies/sequence_parallel.py", "overlap-both", 2),
    ("moe-p4", "studies/moe.py", None, 4),
    # issue 39: an elementwise kernel overlapped with the Reduce and the Broadcast of it
    ("ps-overlap-update-both-p4", "tests/programs/users/ps_overlap_update.py", "overlap-both", 4),
    # issue 39: per-rank partial reductions over the Sliced vocabulary (a size named V)
    ("vocab-parallel-ce-fuse-exp-sum-p4", "tests/programs/users/vocab_parallel_ce.py",
     "fuse-exp-sum", 4),
    ("ce-int-targets-p2", "tests/programs/users/ce_int_targets.py", None, 2),
    # issue 39 item 2: the index ops (design decision 106): a vocab-parallel gather, top-k
    ("vocab-parallel-embedding-p2", "studies/vocab_parallel_embedding.py", None, 2),
    ("vocab-parallel-embedding-fuse-rs-c-ag-p4", "studies/vocab_parallel_embedding.py",
     "fuse-rs-c-ag", 4),
    ("moe-router-fuse-both-p2", "studies/moe_router.py", "fuse-both", 2),
]


def hierarchical_program(program, schedule: str):
    """A case's hierarchical schedule, built from the transforms: "hier-rs-c-ag:G" (split in
    nodes of G GPUs, the updates between the AllReduce across nodes and the gathers) and
    "hier-fuse:G" (that with the optimizer state kept on node slices and the updates fused
    with the weights' gather into one intra-node kernel)."""
    from workbench import ir
    from workbench.transforms import AsSlice, Fuse, HierarchicalSplit, Reorder

    kind, _, per_node = schedule.partition(":")
    h = HierarchicalSplit("g1", int(per_node)).apply(program)
    i = next(k for k, s in enumerate(h.stmts) if s.out.name == "g1")
    updates = tuple(s.out.name for s in h.stmts[i + 1:] if isinstance(s.op, ir.Update)
                    or (isinstance(s.op, ir.Compute) and s.out.name == "w16"))
    reorder = Reorder(updates, "g1")
    sliced = reorder.results(h, None)
    r = reorder.apply(h)
    if kind == "hier-rs-c-ag":
        return r
    state = tuple(v.name for v in program.inputs if v.name in ("m", "v")
                  or (v.name == "w" and "w16" in updates))
    ss = AsSlice(state).apply(r) if state else r
    gathered = tuple(o.name for o in ss.outputs
                     if ss.stmt_defining(o.name).op.__class__ is ir.AllGather)
    return Fuse(tuple(sliced) + gathered).apply(ss)


def case_mode(case) -> str:
    """The fused-collective mode a case is lowered with (its id says push)."""
    return "push" if "-push-" in case[0] else "pull"


def case_options(case):
    """The codegen options a case is lowered with: the defaults, or the "rows" form of row
    kernels where its id says rowgrid (design note 91)."""
    from workbench.options import CodegenOptions

    return CodegenOptions(row_grid="rows" if "-rowgrid-" in case[0] else "resident")


def dropout_program():
    """A 2-D elementwise kernel with a broadcast operand and dropout (model-parallel epilogue)."""
    from workbench import Compute, Dropout, Local, Program, Replicated, Size, Tensor, float16

    T, H = Size("T"), Size("H")
    x = Tensor(float16, [T, H], Local, "x")
    b = Tensor(float16, [H], Replicated, "b")
    r = Tensor(float16, [T, H], Local, "r")
    out = Compute(Dropout(x + b, 0.1) + r, name="out")
    return Program(inputs=[x, b, r], outputs=[out], name="bias_dropout")


def case_program(case):
    from workbench.loader import load

    _, spec, schedule, _ = case
    if spec == "dropout":
        return dropout_program()
    path, _, attr = spec.partition(":")
    pf = load(str(ROOT / path) + (f":{attr}" if attr else ""))
    if schedule and schedule.startswith("hier-"):
        return hierarchical_program(pf.program, schedule)
    if schedule and schedule.endswith("-ce"):  # the fused schedule moved by copy engines
        from workbench.transforms import CopyEngines

        return CopyEngines("g1_rs", 8).apply(pf.schedules[schedule[:-3]].apply())
    return pf.schedules[schedule].apply() if schedule else pf.program
