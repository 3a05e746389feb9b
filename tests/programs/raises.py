from workbench import *

N = Size("N")
x = Tensor(float32, [N], Local, "x")
y = undefined_name + 1  # noqa: F821 - this file raises on purpose
