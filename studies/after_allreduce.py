"""Adam's update kernel after an NCCL AllReduce, arranged to tell apart what makes it slow on
two ranks (GPU run 15: the mixed program's w1 1.654 ms on 2x H200; alone on one GPU, GPU run
17, 1.049 ms). A benchmark program file for compile-and-measure --per-step, not a study:

    workbench compile-and-measure studies/after_allreduce.py:<name> --gpus 2 \
        --set N=2**28 --no-baselines --per-step

`w1_first` (fp16 gradients): the AllReduce, then Adam's w1 update straight away (from m and v;
the reduced gradients are an output of their own). `muls_third`: studies/adam.py's mixed
program with w1's division and square root replaced by multiplies (the same bytes, in the
same place: third kernel after the AllReduce).
"""

from workbench import (
    AllReduce,
    Cast,
    Local,
    P,
    Program,
    Replicated,
    Size,
    Sum,
    Tensor,
    Update,
    Variable,
    float16,
    float32,
    sqrt,
)

N = Size("N", multiple_of=P)
sizes = {"N": 2**28}


def _inputs():
    g = Tensor(float16, [N], Local, "g")
    w = Tensor(float32, [N], Replicated, "w")
    m = Tensor(float32, [N], Replicated, "m")
    v = Tensor(float32, [N], Replicated, "v", range=(0.0, 1.0))
    s = {k: Variable(float32, k) for k in ("lr", "beta1", "beta2", "eps", "step")}
    return g, w, m, v, s


def _w1_first():
    g, w, m, v, s = _inputs()
    g1 = AllReduce(Sum, g)
    m_hat = m / (1 - s["beta1"] ** s["step"])
    v_hat = v / (1 - s["beta2"] ** s["step"])
    w1 = Update(w, w - s["lr"] * m_hat / (sqrt(v_hat) + s["eps"]))
    return Program(inputs=[g, w, m, v, *s.values()], outputs=[g1, w1], name="w1_first")


def _muls_third():
    g, w, m, v, s = _inputs()
    g32 = Cast(float32, AllReduce(Sum, g))
    m1 = Update(m, s["beta1"] * m + (1 - s["beta1"]) * g32)
    v1 = Update(v, s["beta2"] * v + (1 - s["beta2"]) * g32 * g32)
    w1 = Update(w, w - s["lr"] * m1 * (v1 + s["eps"]))
    return Program(inputs=[g, w, m, v, *s.values()], outputs=[w1, m1, v1], name="muls_third")


w1_first = _w1_first()
muls_third = _muls_third()
program = w1_first
