"""Lowering and CUDA generation: a scheduled program becomes one plan, and the plan becomes code.

codegen.lower lowers a schedule once, for P ranks, into a device-neutral Plan (codegen.plan:
buffers and typed steps, each with its work, codegen.work; what a fused region runs as,
codegen.forms). Every reader takes that plan: the cost model prices its steps, the simulator
walks them, the runtime runs them, and codegen.render turns its kernels into CUDA C++ through
jinja2 (templates and headers in codegen/cuda/, package data). Imports the core only
(docs/architecture.md, "The layers"; decision 104).
"""
