"""Speed-only codegen knobs of the fused collective kernels, applied to a lowered Plan.

Each knob changes how a fused collective's kernel moves its bytes, never what it computes:
every lane still computes element e = i + j from the same operands with the same C text, so
the interpreter's semantics are untouched. Off (the defaults), a plan is returned as lowered
and every kernel renders byte-identically; on, the knob enters the KernelSpec and so the
mangled name (the compile-cache key). Design note 55.

- vec_bytes (16 or 32): bytes of the widest operand that a thread moves per vector. 32 is two
  16-byte loads (stores) per operand per thread, adjacent in memory: twice the loads in flight
  per thread without the unroll's second stride-apart address and predicate (f32: V = 8).
  A kernel whose widest operand already moves 32 bytes (mixed precision: V = 8 for the f16
  operands' 16 bytes, so 32 for the f32 ones) keeps its V: doubling it again spills under
  the 64-register cap of __launch_bounds__(512, 2) (nvcc -Xptxas -v: 76 bytes, adam-mixed).
- cache ("default" or "stream"): "stream" loads and stores every vector with the evict-first
  streaming hint (`ld.global.cs` / `st.global.cs`, CUDA's __ldcs/__stcs): an optimizer step
  touches each byte once, so its lines should leave L2 first.
"""

from __future__ import annotations

import dataclasses

from codegen.plan import ChunkedStep, CopyEngineStep, KernelStep, OverlapStep, Plan
from codegen.spec import mangle
from workbench.options import CodegenOptions

# The kernels the knobs apply to (their loops come from _body.cu.j2's vector path).
TEMPLATES = ("fused_collective.cu.j2",)


def tune_plan(plan: Plan, opts: CodegenOptions) -> Plan:
    """`plan` with every fused collective kernel's spec set to the options' vec_bytes and
    cache (and renamed); the plan itself when both are the defaults."""
    vec_bytes, cache = opts.vec_bytes, opts.cache
    if vec_bytes == 16 and cache == "default":
        return plan
    return dataclasses.replace(plan, steps=tuple(_step(s, vec_bytes, cache) for s in plan.steps))


def _step(step, vec_bytes: int, cache: str):
    if isinstance(step, KernelStep):
        spec = step.spec
        if spec.template not in TEMPLATES:
            return step
        # spec.vec elements are 16 bytes of the narrowest operand type
        vec = max(spec.vec, vec_bytes // max(spec.elem_bytes, default=4))
        hint = "" if cache == "default" else cache
        if vec == spec.vec and hint == spec.cache_hint:
            return step
        return dataclasses.replace(step, spec=mangle(dataclasses.replace(
            spec, vec=vec, cache_hint=hint)))
    if isinstance(step, OverlapStep):
        return dataclasses.replace(step, consumer=_step(step.consumer, vec_bytes, cache))
    if isinstance(step, CopyEngineStep):
        return dataclasses.replace(step, kernel=_step(step.kernel, vec_bytes, cache))
    if isinstance(step, ChunkedStep):
        return dataclasses.replace(step, steps=tuple(_step(s, vec_bytes, cache)
                                                     for s in step.steps))
    return step
