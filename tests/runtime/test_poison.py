"""Every buffer dtype a plan allocates has a poison pattern (workbench.runtime.gpu.POISON):
a run poisons what it must write before it runs, so an output a kernel never wrote mismatches
the reference. int32 outputs (TopK's indices, issue 39 item 2) had none: a KeyError on the
first GPU run of a program with one."""

import numpy as np

from codegen.plan import ELEMENT_BYTES
from workbench.runtime.gpu import POISON


def test_every_buffer_dtype_but_flags_has_a_poison_pattern():
    assert set(ELEMENT_BYTES) - {"u32"} <= set(POISON)


def test_the_int32_poison_is_no_index_a_program_reaches():
    bits, pattern = POISON["i32"]
    value = int(np.array([pattern], dtype=np.uint32).view(np.int32)[0])
    assert bits == 32 and value > 2**30


def test_every_buffer_dtype_but_flags_has_a_torch_view_type():
    """NCCL's buffers go through torch views where nccl4py is not used: an int32 AllGather
    (the MoE router's expert indices) needs one too."""
    from workbench.runtime.gpu import TYPESTR

    assert set(ELEMENT_BYTES) - {"u32", "f64"} <= set(TYPESTR)
