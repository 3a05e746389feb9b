from workbench import *

N = Size("N")
w = Tensor(float32, [N], Replicated, "w")
program = Program(inputs=[w], outputs=[AllReduce(Sum, w)])
