from workbench import *

N = Size("N")
x = Tensor(float32, [N], Local, "x")
