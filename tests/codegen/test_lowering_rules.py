"""One place per op in the backend: LOWERING_RULES holds one entry per IR op class the GPU
backend generates, and `lower` names the statement of an op it does not."""

from __future__ import annotations

import pytest

from codegen.lower import LOWERING_RULES, lower
from workbench import Local, P, Program, Reduce, Size, Sum, Tensor, float32, ir
from workbench.errors import RuntimeFault

# The op classes the backend does not generate yet (issue 15 adds them); a new rule moves its
# op from here into LOWERING_RULES.
NOT_GENERATED = {ir.Reduce, ir.ReduceTensor}


def test_every_op_class_has_a_lowering_rule_or_is_listed_as_not_generated():
    assert set(LOWERING_RULES) | NOT_GENERATED == set(ir.OP_CLASSES)
    assert not set(LOWERING_RULES) & NOT_GENERATED


def test_an_op_without_a_rule_is_named_with_its_statement():
    N = Size("N", multiple_of=P)
    g = Tensor(float32, [N], Local, "g")
    total = Reduce(Sum, g, root=0)
    program = Program(inputs=[g], outputs=[total], name="ps")
    with pytest.raises(RuntimeFault, match=r"the GPU backend must support every op of ps, got "
                       r"statement total \(Reduce\(Sum, g, root=0\)\), which it does not "
                       r"generate yet"):
        lower(program, 2)
