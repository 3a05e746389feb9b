"""Golden rendered CUDA for the studies' kernels (regenerate with WORKBENCH_REGEN_GOLDEN=1)."""

import pytest
from codegen_cases import CASES, case_mode, case_options, case_program
from conftest import assert_golden

from codegen.lower import lower
from codegen.plan import (
    ChunkedStep,
    CopyEngineStep,
    GemmStep,
    NcclStep,
    OverlapStep,
    ReduceStep,
    SendStep,
)
from codegen.render import render


def _plan_text(plan) -> str:
    # A pipeline's plan also says each buffer's and step's stage (single-group plans print as
    # they always did).
    staged = len(plan.groups) > 1
    lines = [f"// plan for P={plan.P}" + (f" per stage, stages {', '.join(plan.groups)}"
                                          if staged else "")
             + (f" per node, {plan.nodes} nodes (a node's view)" if plan.per_node else "")]
    for b in plan.buffers:
        lines.append(f"// buffer {b.name}: {b.dtype}[{b.numel}]{' peer' if b.peer else ''}"
                     + (f" @{plan.groups[b.group]}" if staged else ""))
    for s, g in zip(plan.steps, plan.step_groups):
        where = f"@{'+'.join(plan.groups[k] for k in g)} " if staged else ""
        lines.append(f"// {where}{_step_text(s)[3:]}")
    return "\n".join(lines) + "\n"


def _step_text(s) -> str:
    if isinstance(s, SendStep):
        return (f"// nccl send {s.src.buffer}+{s.src.offset} -> recv {s.dst.buffer}+"
                f"{s.dst.offset} count {s.count} {s.dtype}")
    if isinstance(s, ChunkedStep):
        return (f"// in {s.chunks} chunks of {s.rows} rows / {s.per}:\n" + "\n".join(
            f"//   {_step_text(x)[3:]}" for x in s.steps))
    if isinstance(s, NcclStep):
        return (f"// nccl {s.op}({s.reduce}) {s.src.buffer}+{s.src.offset} -> "
                f"{s.dst.buffer}+{s.dst.offset} count {s.count} {s.dtype}"
                + (f" over {s.comm}" if s.comm != "group" else "")
                + (" chunked by root" if s.by_root else ""))
    if isinstance(s, GemmStep):
        return (f"// gemm {s.c.buffer} = {s.a.buffer} @ {s.b.buffer}: [{s.m}, {s.k}] @ "
                f"[{s.k}, {s.n}] {s.dtype}"
                + (f", epilogue {s.epilogue}(bias {s.bias.buffer})" if s.epilogue else ""))
    if isinstance(s, ReduceStep):
        return (f"// reduce({s.reduce}) {s.x.buffer}+{s.x.offset} count {s.count} {s.dtype} "
                f"-> {s.out.buffer} f32")
    if isinstance(s, CopyEngineStep):
        copies = "\n".join(
            f"//   {'pull' if c.pull else 'push'} {c.src}+{c.src_offset} -> {c.dst}+"
            f"{c.dst_offset} count {c.numel} {c.dtype}" for c in s.copies)
        return (f"// copy engines in {s.chunks} pieces:\n//   {_step_text(s.start)[3:]}\n"
                f"{copies}\n//   {_step_text(s.kernel)[3:]}\n//   {_step_text(s.end)[3:]}")
    if isinstance(s, OverlapStep):
        return (f"// overlap in {s.chunks} chunks:\n//   {_step_text(s.producer)[3:]}\n"
                f"//   {_step_text(s.consumer)[3:]}")
    return f"// kernel {s.spec.name} for {', '.join(s.stmts)}"


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rendered_cuda_matches_golden(case):
    plan = lower(case_program(case), case[3], case_options(case),
                 collective_mode=case_mode(case))
    parts = [_plan_text(plan)] + [render(spec) for spec in plan.kernels()]
    assert_golden(f"cuda/{case[0]}.cu", "\n".join(parts))


def test_kernel_names_are_deterministic_and_distinct():
    a = lower(case_program(CASES[5]), P=2).kernels()
    b = lower(case_program(CASES[5]), P=2).kernels()
    assert [k.name for k in a] == [k.name for k in b]
    p4 = lower(case_program(CASES[6]), P=4).kernels()
    assert {k.name for k in a}.isdisjoint({k.name for k in p4})


def test_push_mode_stages_through_peer_stores_only():
    case = next(c for c in CASES if c[0] == "adam-fuse-rs-c-ag-p2")
    pull = lower(case_program(case), P=2)
    push = lower(case_program(case), P=2, collective_mode="push")
    peer = {m: {b.name for b in plan.buffers if b.peer} for m, plan in
            (("pull", pull), ("push", push))}
    # pull reads the gradient from the peers; push writes it into their staging buffer instead
    assert "g" in peer["pull"] and "g" not in peer["push"] and "stage_g" in peer["push"]
    stage = next(b for b in push.buffers if b.name == "stage_g")
    assert str(stage.numel) == "N"  # P slots of N/P elements
    assert push.kernels()[0].pushes and not pull.kernels()[0].pushes
