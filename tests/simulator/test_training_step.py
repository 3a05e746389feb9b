"""The training step of the example GPT: shapes -> parameters and flops (counted by hand on a
tiny model), buckets, GEMM waves, and the simulated step at P = 1 and P > 1 (design note 84)."""

import pytest

from cost_model import training as ct
from cost_model.hardware import preset
from simulator.training import Side, Stage, simulate_step, workbench_bucket_numels

TINY = ct.GptShape(d_model=8, layers=1, heads=2, vocab=5, seq=4, batch=2)


def test_tiny_model_parameters_by_hand():
    # tok 5x8 = 40, pos 4x8 = 32; block: 2 LayerNorms 4 x 8 = 32, qkv 8x24 + 24 = 216,
    # proj 64 + 8 = 72, fc 8x32 + 32 = 288, out 32x8 + 8 = 264; final LN 16; head 5x8 = 40
    assert ct.parameter_count(TINY) == 40 + 32 + 32 + 216 + 72 + 288 + 264 + 16 + 40 == 1000
    names = [n for n, _ in ct.parameters(TINY)]
    assert names[:2] == ["tok.weight", "pos.weight"] and names[-1] == "head.weight"
    assert names[2:6] == ["blocks.0.ln1.weight", "blocks.0.ln1.bias", "blocks.0.ln2.weight",
                          "blocks.0.ln2.bias"]


def test_tiny_model_gemm_and_attention_flops_by_hand():
    fwd = {k.name: k for k in ct.forward_kernels(TINY)}
    # 2 m n k over m = 2 x 4 = 8 tokens
    assert fwd["blocks.0.qkv"].work.flops == 2 * 8 * 24 * 8 == 3072
    assert fwd["blocks.0.proj"].work.flops == 1024
    assert fwd["blocks.0.fc"].work.flops == 4096
    assert fwd["blocks.0.out"].work.flops == 4096
    assert fwd["head"].work.flops == 2 * 8 * 5 * 8 == 640
    # causal attention: QK^T and PV, 2 B T^2 d each, half of it masked: 2 x 2 x 16 x 8
    assert fwd["blocks.0.attention"].work.flops == 512
    gemm = sum(k.work.flops for k in fwd.values() if k.gemm and "attention" not in k.name)
    assert gemm == 12928
    bwd = [k for k in ct.backward_kernels(TINY) if k.gemm and "attention" not in k.name]
    assert sum(k.work.flops for k in bwd) == 2 * 12928  # dX and dW of every Linear
    att = next(k for k in ct.backward_kernels(TINY) if k.name == "blocks.0.attention.backward")
    assert att.work.flops == 5 * 2 * 16 * 8
    # every parameter's gradient is completed by exactly one backward kernel
    done = [g for k in ct.backward_kernels(TINY) for g in k.grads]
    assert sorted(done) == sorted(n for n, _ in ct.parameters(TINY))


def test_gemm_waves():
    # 128 tokens x 6144 (the 806M model's qkv): 192 tiles of 64x64 on 132 SMs, two waves
    assert ct.gemm_utilization(128, 6144, 132) == pytest.approx(192 / 264)
    assert ct.gemm_utilization(64 * 132, 64, 132) == 1.0
    assert ct.gemm_utilization(2048, 4096, 132) > 0.96


def test_buckets_fill_in_reverse_with_ddp_first_cap():
    params = (("a", 10), ("b", 10), ("c", 30), ("d", 5))
    # 40 elements of 4 bytes a bucket: d + c, then b + a
    assert ct.fill_buckets(params, 4, 160) == (("d", "c"), ("b", "a"))
    # DDP's first bucket holds 5 elements: d alone, then c + b, then a
    assert ct.fill_buckets(params, 4, 160, first_bucket_bytes=20) == (("d",), ("c", "b"),
                                                                       ("a",))
    with pytest.raises(ct.TrainingShapeError, match="bucket size must hold one element"):
        ct.fill_buckets(params, 4, 2)


@pytest.mark.parametrize("kwargs, message", [
    ({"d_model": 10, "layers": 1, "heads": 3}, "d_model must be a multiple of heads, got "
                                               "d_model 10 and heads 3"),
    ({"d_model": 8, "layers": 0, "heads": 2}, "layers must be a positive integer, got 0"),
    ({"d_model": 8, "layers": 1, "heads": 2, "dtype": "f64"}, "dtype must be one of f32, bf16, "
                                                              "f16, got 'f64'"),
])
def test_bad_shapes_name_the_field(kwargs, message):
    with pytest.raises(ct.TrainingShapeError, match=message):
        ct.GptShape(**kwargs)


def _wb(shape, P, overlap, numels_seconds=(("gpu", 1e-4),)):
    stages = {n: tuple(Stage(f"s{i}", r, t) for i, (r, t) in enumerate(numels_seconds))
              for n in workbench_bucket_numels(shape, P, ct.DDP_BUCKET_BYTES)}
    return Side("workbench", overlap=overlap, schedule="test", stages=stages)


def test_no_communication_at_one_gpu():
    cluster = preset("h100x8")
    shape = ct.GptShape(1024, 2, 8, batch=4)
    for side in (Side("torch", ddp=False), Side("torch", ddp=True), _wb(shape, 1, False),
                 _wb(shape, 1, True)):
        r = simulate_step(shape, cluster, 1, side, 0.75)
        assert r.link_busy_s == 0 and r.exposed_comm_s == 0
        assert not [row for row in r.rows if row.resource == "link"]
    # DDP at P = 1 still copies every gradient into its bucket and back (design note 65)
    plain = simulate_step(shape, cluster, 1, Side("torch", ddp=False), 0.75)
    ddp = simulate_step(shape, cluster, 1, Side("torch", ddp=True), 0.75)
    assert ddp.backward_s > plain.backward_s and ddp.forward_s == plain.forward_s


def test_communication_above_one_gpu_overlaps_backward():
    cluster = preset("dgx-h100", 2)
    shape = ct.GptShape(1024, 4, 8, batch=4)
    r = simulate_step(shape, cluster, 16, Side("torch"), 0.75)
    assert r.link_busy_s > 0 and r.buckets > 1
    # DDP's AllReduces run beside backward: what is exposed is less than all of them
    assert 0 <= r.exposed_comm_s < r.link_busy_s
    # and take NCCL's channels' SMs from backward's kernels while they run
    alone = simulate_step(shape, cluster, 1, Side("torch"), 0.75)
    assert r.backward_s > alone.backward_s and r.forward_s == alone.forward_s
    # a bucket step whose communication holds the link overlaps backward in backward, and
    # not after it
    comm = (("link", 2e-4), ("gpu", 1e-5))
    after = simulate_step(shape, cluster, 16, _wb(shape, 16, False, comm), 0.75)
    inside = simulate_step(shape, cluster, 16, _wb(shape, 16, True, comm), 0.75)
    assert after.exposed_comm_s == pytest.approx(after.buckets * 2e-4)
    assert inside.step_s < after.step_s


def test_kernels_of_both_streams_take_turns_on_the_sms():
    # at P = 1 a fused kernel in backward hides nothing: it time-shares the SMs with
    # backward's kernels (design note 16), so the step is the one after backward
    cluster = preset("h100x8")
    shape = ct.GptShape(1024, 2, 8, batch=4)
    after = simulate_step(shape, cluster, 1, _wb(shape, 1, False), 0.75)
    inside = simulate_step(shape, cluster, 1, _wb(shape, 1, True), 0.75)
    # (but for the launches of the gradient copies: one per gradient from backward's hooks,
    # one per bucket in step())
    assert inside.step_s == pytest.approx(after.step_s, rel=0.03)
    assert inside.optimizer_s < after.optimizer_s and inside.backward_s > after.backward_s


def test_p_must_fit_the_cluster():
    with pytest.raises(Exception, match=r"P must be 1..8 \(the GPUs of h100x8\), got 9"):
        simulate_step(TINY, preset("h100x8"), 9, Side("torch"), 0.75)


def test_a_fused_collective_beside_backward_is_the_optimistic_bound():
    from simulator.training import program_stages
    from workbench.interpreter import bind_sizes
    from workbench.loader import load

    program = load("studies/adam.py").schedules["fuse-rs-c-ag"].apply()
    cluster = preset("dgx-h100")
    for P, kinds in ((1, {"gpu"}), (8, {"fused"})):  # nothing to put beside at P = 1
        bound = bind_sizes(program, {"N": 2**20 * P, "P": P})
        shared = program_stages(program, cluster, bound)
        beside = program_stages(program, cluster, bound, "beside")
        assert {s.resource for s in shared} == {"gpu"}
        assert {s.resource for s in beside} == kinds
        assert [s.seconds for s in beside] == [s.seconds for s in shared]
        assert all(s.gpu_seconds <= s.seconds for s in beside)
    shape = ct.GptShape(1024, 4, 8, batch=4)
    numels = workbench_bucket_numels(shape, 8, ct.DDP_BUCKET_BYTES)
    steps = {}
    for mode in ("time-share", "beside"):
        stages = {n: program_stages(program, cluster, bind_sizes(program, {"N": n, "P": 8}),
                                    mode) for n in set(numels)}
        side = Side("workbench", overlap=True, schedule="fuse-rs-c-ag", stages=stages)
        steps[mode] = simulate_step(shape, cluster, 8, side, 0.75)
    assert steps["beside"].step_s < steps["time-share"].step_s
    assert steps["beside"].link_busy_s > 0 == steps["time-share"].link_busy_s


def test_lent_gradients_skip_the_copy_at_one_gpu_only():
    cluster = preset("h100x8")
    shape = ct.GptShape(1024, 2, 8, batch=4)
    steps = {}
    for mode in ("copy", "add", "lend"):
        stages = {n: (Stage("update", "gpu", 1e-4),)
                  for n in workbench_bucket_numels(shape, 1, ct.DDP_BUCKET_BYTES, mode)}
        side = Side("workbench", accumulate=mode, schedule="t", stages=stages)
        steps[mode] = simulate_step(shape, cluster, 1, side, 0.75)
    # add reads the bucket too (3 passes, in backward), copy 2 (in step()), lend none for
    # parameters of 4 MiB or more
    def copying(r):
        return sum(row.t_end - row.t_start for row in r.rows if row.op.startswith("into"))

    assert 0 < copying(steps["lend"]) < copying(steps["copy"]) < copying(steps["add"])
    assert steps["copy"].backward_s < steps["add"].backward_s
    assert steps["copy"].optimizer_s > steps["add"].optimizer_s
    assert steps["lend"].buckets > steps["copy"].buckets  # each large parameter alone
    side = Side("workbench", accumulate="lend", schedule="t", stages={})
    with pytest.raises(Exception, match="lent gradients .* must run at P = 1"):
        simulate_step(shape, preset("dgx-h100"), 8, side, 0.75)


def test_the_optimizer_program_at_one_gpu_touches_no_link():
    from simulator.training import program_stages
    from workbench.interpreter import bind_sizes
    from workbench.loader import load

    loaded = load("studies/adam.py")
    for program in (loaded.program, *(s.apply() for s in loaded.schedules.values())):
        stages = program_stages(program, preset("h100x8"), bind_sizes(program, {"N": 2**20,
                                                                               "P": 1}))
        assert stages and {s.resource for s in stages} == {"gpu"}
        assert all(s.seconds > 0 for s in stages)


def test_large_parameters_alone_and_the_small_ones_fill_across_them():
    params = (("a", 10), ("big", 100), ("b", 10), ("c", 5))
    assert ct.fill_buckets(params, 4, 160, alone_bytes=400) == (("big",), ("c", "b", "a"))


def test_a_capped_fused_grid_holds_its_blocks_sms_and_backward_runs_on_the_rest():
    # design note 98: wbtorch's collective_grid = 32 leaves backward 100 of the 132 SMs; the
    # kernel's link time is the cost model's at that grid (the preset has no block curve: the
    # full grid's) and its computation runs on its 32 SMs (note 99), so the step in backward
    # gets shorter and the link carries the kernel
    from plan_priced import kernel_steps

    from codegen.lower import lower
    from cost_model.ops.fused import fused_parts_cost
    from cost_model.plan_cost import PlanContext, fused_parts_of
    from simulator.training import capped_sms, program_stages
    from workbench.interpreter import bind_sizes
    from workbench.loader import load
    from workbench.options import CodegenOptions

    program = load("studies/adam.py").schedules["fuse-rs-c-ag"].apply()
    cluster = preset("h100x8")
    grid32, full = CodegenOptions(collective_grid=32), CodegenOptions()
    assert capped_sms(cluster, grid32) == 32
    assert capped_sms(cluster, full) == capped_sms(cluster, CodegenOptions(collective_grid=132))
    assert capped_sms(cluster, full) == 0
    bound = bind_sizes(program, {"N": 2**20 * 2, "P": 2})
    capped = program_stages(program, cluster, bound, options=grid32)
    shared = program_stages(program, cluster, bound)
    fused = [s for s in capped if s.resource == "link"]
    assert fused and all(s.channels == 32 for s in fused)
    # the same statements; the capped kernel no faster than the full grid, at the cost
    # model's price for a kernel on 32 SMs
    assert [s.name for s in capped] == [s.name for s in shared]
    assert all(c.seconds >= s.seconds for c, s in zip(capped, shared, strict=True))
    pc = PlanContext.of(lower(program, 2, grid32), cluster, bound)
    (kernel,) = kernel_steps(pc.plan, "collective")
    on_32 = fused_parts_cost(pc.ctx, fused_parts_of(pc, kernel), None, 32 / cluster.gpu.sm_count)
    assert fused[0].seconds == pytest.approx(float(on_32.time_s))
    shape = ct.GptShape(1024, 4, 8, batch=4)
    numels = set(workbench_bucket_numels(shape, 2, ct.DDP_BUCKET_BYTES))
    steps = {}
    for name, options in (("full", full), ("grid32", grid32)):
        stages = {n: program_stages(program, cluster, bind_sizes(program, {"N": n, "P": 2}),
                                    options=options) for n in numels}
        side = Side("workbench", overlap=True, schedule="fuse-rs-c-ag", stages=stages)
        steps[name] = simulate_step(shape, cluster, 2, side, 0.75)
    assert steps["grid32"].step_s < steps["full"].step_s
    assert steps["grid32"].link_busy_s > 0 == steps["full"].link_busy_s
    # backward's kernels ran on 100 SMs while the kernel held its 32: slower than alone
    after = simulate_step(shape, cluster, 2, Side("workbench", schedule="fuse-rs-c-ag",
                                                  stages=stages), 0.75)
    assert steps["grid32"].backward_s > after.backward_s
