"""The vocab-parallel embedding (Megatron's VocabParallelEmbedding) on P GPUs: the table is
Sliced(0) over the vocabulary, each rank looks up the token ids that fall in its rows and
zeroes the others (a Gather over a sliced table is each rank's partial, Local), and an
AllReduce(Sum) of the partials gives every rank the whole lookup; Gemma scales it by
sqrt(H). Design decision 106 says what an out-of-range id does (a row of zeros).

    e = Gather(E, ids)                   rank r: rows of ids in [r V/P, (r+1) V/P), else 0
    x = AllReduce(Sum, e) * sqrt(H)      every rank: the embedding of every token

Llama 3's vocabulary (V = 128256) and hidden size (H = 4096), bf16, T = 8192 tokens.
Schedules: `rs-c-ag` splits the AllReduce and scales the reduced slices (the scale on 1/P of
the rows), `fuse-rs-c-ag` runs the reduce-scatter, the scale and the all-gather as one kernel.
The ids' random test values are drawn in [-2, 64): some fall outside every rank's rows.
"""

import sympy

from workbench import *

V = Size("V", multiple_of=P)  # vocabulary
H = Size("H")  # hidden size
T = Size("T", multiple_of=P)  # tokens
sizes = {"V": 128256, "H": 4096, "T": 8192}


def build(dtype=bfloat16, name="vocab_parallel_embedding"):
    E = Tensor(dtype, [V, H], Sliced(0), "E")  # each rank's rows of the vocabulary
    ids = Tensor(int32, [T], Replicated, "ids", range=(-2.0, 64.0))
    e = Gather(E, ids)
    x = AllReduce(Sum, e)
    out = Compute(x * sympy.sqrt(H))
    program = Program(inputs=[E, ids], outputs=[out], name=name)

    @schedule(program)
    def rs_c_ag(s):
        """ReduceScatter the partial lookups, scale this rank's rows, AllGather them."""
        rs, ag = s.split(x)
        s.reorder(out, before=ag)

    @schedule(program)
    def fuse_rs_c_ag(s):
        """The reduce-scatter, the scale and the all-gather as one kernel."""
        rs, ag = s.split(x)
        (out_s,) = s.reorder(out, before=ag)
        s.fuse(rs, out_s, out)

    return program, [rs_c_ag, fuse_rs_c_ag]


program, schedules = build()
