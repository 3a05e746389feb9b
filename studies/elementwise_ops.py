"""Elementwise kernels of equal HBM bytes and different arithmetic, to learn on one GPU what an
IEEE division, a square root and a dropout hash cost inside a memory-bound kernel (GPU run 15
measured Adam's and LAMB's updates and the pipeline's f16 dropout epilogue 30-70 % above
their HBM bytes). A benchmark program file for compile-and-measure, not a study; every
program is one kernel:

    workbench compile-and-measure studies/elementwise_ops.py:<name> --gpus 1 \
        --set N=2**28 --no-baselines

fp32 programs read three N-element tensors and write one (16 bytes per element, Adam's w1):
`muls` (multiplies and adds only), `div` (one division), `sqrt` (one square root),
`adam_w1` (studies/adam.py's update: two divisions and a square root), `lamb_u` (LAMB's
update direction: the same plus a weight-decay term, into a new tensor), and `divs8` /
`sqrts8` (eight in a chain: where the arithmetic, not HBM, bounds the kernel). f16 programs
on [T, H] read two tensors and a bias row and write one: `bias_residual` and
`bias_dropout_residual` (the pipeline's epilogue).
"""

from workbench import (
    Compute,
    Dropout,
    Local,
    Program,
    Size,
    Tensor,
    Update,
    Variable,
    float16,
    float32,
    sqrt,
)

N, T, H = Size("N"), Size("T"), Size("H")
sizes = {"N": 2**28, "T": 8192, "H": 12288}


def _fp32(name, update):
    """A program updating w from w, m, v and scalars with `update(w, m, v, s)`."""
    w = Tensor(float32, [N], Local, "w")
    m = Tensor(float32, [N], Local, "m")
    v = Tensor(float32, [N], Local, "v", range=(0.0, 1.0))
    s = {k: Variable(float32, k) for k in ("lr", "beta1", "beta2", "eps", "step", "wd")}
    out = update(w, m, v, s)
    return Program(inputs=[w, m, v, *s.values()], outputs=[out], name=name)


def _adam_direction(m, v, s):
    m_hat = m / (1 - s["beta1"] ** s["step"])
    v_hat = v / (1 - s["beta2"] ** s["step"])
    return m_hat / (sqrt(v_hat) + s["eps"])


def _chain(op, x, s, k=8):
    for _ in range(k):
        x = op(x, s)
    return x


muls = _fp32("muls", lambda w, m, v, s: Update(w, w - s["lr"] * m * (v + s["eps"])))
div = _fp32("div", lambda w, m, v, s: Update(w, w - s["lr"] * m / (v + s["eps"])))
sqrt_ = _fp32("sqrt", lambda w, m, v, s: Update(w, w - s["lr"] * m * sqrt(v + s["eps"])))
adam_w1 = _fp32("adam_w1", lambda w, m, v, s: Update(w, w - s["lr"] * _adam_direction(m, v, s)))
lamb_u = _fp32("lamb_u", lambda w, m, v, s: Compute(_adam_direction(m, v, s) + s["wd"] * w,
                                                    name="u"))
divs8 = _fp32("divs8", lambda w, m, v, s: Update(
    w, w - _chain(lambda x, s: x / (v + s["eps"]), m, s)))
sqrts8 = _fp32("sqrts8", lambda w, m, v, s: Update(
    w, w - _chain(lambda x, s: sqrt(x + s["eps"]), m * v, s)))


def _epilogue(name, dropout: bool):
    x = Tensor(float16, [T, H], Local, "x")
    b = Tensor(float16, [H], Local, "b")
    r = Tensor(float16, [T, H], Local, "r")
    biased = x + b
    out = Compute((Dropout(biased, 0.1) if dropout else biased) + r, name="out")
    return Program(inputs=[x, b, r], outputs=[out], name=name)


bias_residual = _epilogue("bias_residual", dropout=False)
bias_dropout_residual = _epilogue("bias_dropout_residual", dropout=True)

program = adam_w1
