"""Speed-only knobs of the fused collective kernels (codegen.tuning, design note 55): off, the
plan is the one lowered without them (goldens unchanged); on, the kernel renders different,
compilable CUDA under another name, and nothing but the fused collective's kernel changes."""

import shutil
import subprocess
from pathlib import Path

import pytest
from codegen_cases import case_program

from codegen.lower import lower
from codegen.render import include_dir, render
from workbench.errors import RuntimeFault

HAS_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()

# (id, program, schedule, P, collective mode): P = 1 (what optimizer_steps.py times), pull
# and push at P > 1, a norm (LAMB), mixed precision (f16 vectors), an overlapped consumer.
CASES = [
    ("adam-p1", "studies/adam.py", "fuse-rs-c-ag", 1, "pull"),
    ("sgd-p1", "studies/sgd.py", "fuse-rs-c-ag", 1, "pull"),
    ("adam-mixed-push-p4", "studies/adam.py:mixed", "fuse-rs-c-ag", 4, "push"),
    ("lamb-p2", "studies/lamb.py", "fuse-rs-c-ag", 2, "pull"),
    ("model-parallel-overlap-p2", "studies/model_parallel.py", "overlap-mm-fuse-ar-c", 2, "pull"),
]
KNOBS = [(32, "default"), (16, "stream"), (32, "stream")]


def _plan(case, vec_bytes=16, cache="default"):
    cid, spec, sched, P, mode = case
    return lower(case_program((cid, spec, sched, P)), P, collective_mode=mode,
                 collective_vec_bytes=vec_bytes, collective_cache=cache)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_default_knobs_leave_the_plan_as_lowered(case):
    cid, spec, sched, P, mode = case
    plain = lower(case_program((cid, spec, sched, P)), P, collective_mode=mode)
    tuned = _plan(case)
    assert [k.name for k in tuned.kernels()] == [k.name for k in plain.kernels()]
    assert [render(k) for k in tuned.kernels()] == [render(k) for k in plain.kernels()]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_knob_renders_another_kernel_under_another_name(case):
    plain = _plan(case)
    plain_names = tuple(k.name for k in plain.kernels())
    renamed = set()
    for vec_bytes, cache in KNOBS:
        tuned = _plan(case, vec_bytes, cache)
        # only the fused collective kernels change; buffers and the rest stay as lowered
        assert tuned.buffers == plain.buffers and tuned.locs == plain.locs
        changed = 0
        for a, b in zip(plain.kernels(), tuned.kernels(), strict=True):
            if a.template != "fused_collective.cu.j2":
                assert a == b
                continue
            src = render(b)
            assert b.vec == max(a.vec, vec_bytes // max(a.elem_bytes))
            assert f"constexpr int V = {b.vec};" in src
            assert ("wb::kStream" in src) == (cache == "stream")
            if b.vec == a.vec and cache == "default":
                assert b == a  # the knob has nothing to change here
                continue
            changed += 1
            assert b.name != a.name and b.name in src
            # the computation is the same C text: only the vector width and hints differ
            assert b.assigns == a.assigns and b.loads == a.loads and b.stores == a.stores
        names = tuple(k.name for k in tuned.kernels())
        assert (names == plain_names) == (changed == 0)
        renamed.add(names)
    # three distinct kernels; mixed precision keeps V, so only the stream hint is new there
    assert len(renamed - {plain_names}) == (1 if "mixed" in case[0] else 3)


def test_32_byte_vectors_double_v_unless_the_widest_operand_moves_32_bytes():
    """f32 (adam at P = 1): V 4 -> 8; f16 only (the model-parallel epilogue): 8 -> 16; mixed
    f16/f32 (adam-mixed): V = 8 already moves 32 bytes of each f32 operand, so it stays."""
    def vecs(case, vec_bytes):
        return [k.vec for k in _plan(case, vec_bytes).kernels()
                if k.template == "fused_collective.cu.j2"]
    assert (vecs(CASES[0], 16), vecs(CASES[0], 32)) == ([4], [8])
    assert (vecs(CASES[4], 16), vecs(CASES[4], 32)) == ([8], [16])
    assert (vecs(CASES[2], 16), vecs(CASES[2], 32)) == ([8], [8])


def test_bad_knob_values_are_refused_with_the_choices():
    case = CASES[0]
    with pytest.raises(RuntimeFault, match=r"codegen option vec_bytes must be one of \(16, 32\) "
                                           r"\(bytes per operand a thread moves per vector\), "
                                           r"got 64; 16 is the default"):
        _plan(case, 64)
    with pytest.raises(RuntimeFault, match=r"codegen option cache must be one of \('default', "
                                           r"'stream'\) \(the cache hint of a fused "
                                           r"collective's accesses\), got 'evict'"):
        _plan(case, 16, "evict")


@pytest.mark.skipif(not HAS_NVCC, reason="nvcc (CUDA toolkit) not installed")
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_tuned_kernels_compile(case, cubin_cache):
    from workbench.runtime.compiler import compile_cubin

    for vec_bytes, cache in KNOBS:
        for spec in _plan(case, vec_bytes, cache).kernels():
            if spec.template != "fused_collective.cu.j2":
                continue
            cubin = compile_cubin(spec.name, render(spec), include_dir())
            assert spec.name.encode() in cubin.read_bytes()


@pytest.mark.skipif(not HAS_NVCC, reason="nvcc (CUDA toolkit) not installed")
def test_stream_hint_reaches_the_ptx(tmp_path):
    from workbench.runtime.compiler import NVCC_FLAGS, nvcc_path

    spec = next(k for k in _plan(CASES[0], 32, "stream").kernels()
                if k.template == "fused_collective.cu.j2")
    src = tmp_path / "k.cu"
    src.write_text(render(spec))
    flags = [f for f in NVCC_FLAGS if f != "-cubin"]
    subprocess.run([nvcc_path(), *flags, "-ptx", "-I", str(include_dir()), "-o",
                    str(tmp_path / "k.ptx"), str(src)], check=True)
    ptx = (tmp_path / "k.ptx").read_text()
    # adam at P = 1, f32, 32-byte vectors: g, w, m, v loaded as two 16-byte streaming loads
    # each, and every vector store streaming; no plain vector access is left
    assert ptx.count("ld.global.cs.v4.u32") == 8
    assert ptx.count("st.global.cs.v4.u32") >= 6
    assert "ld.global.v4" not in ptx and "st.global.v4" not in ptx
