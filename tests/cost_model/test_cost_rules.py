"""The cost model's rule tables: every op class of the IR has one entry in each (a new op that
forgets one fails here, not in a study), the ops a fused kernel may hold have a fused-part
rule, and an op with no rule is an error that names it."""

from types import SimpleNamespace

import pytest

from cost_model.ops import (
    COST_RULES,
    FIXED_COST_RULES,
    FUSED_PART_RULES,
    fused_parts,
    stmt_cost,
    stmt_fixed_s,
)
from workbench import ir
from workbench.errors import WorkbenchError

OPS = sorted(ir.OP_CLASSES, key=lambda c: c.__name__)


def test_the_ir_has_the_op_classes_the_tables_are_checked_against():
    assert len(OPS) >= 14  # Compute .. Overlapped: the union and the groups were found


@pytest.mark.parametrize("table", [COST_RULES, FIXED_COST_RULES],
                         ids=["COST_RULES", "FIXED_COST_RULES"])
@pytest.mark.parametrize("op", OPS, ids=[c.__name__ for c in OPS])
def test_every_op_class_has_a_cost_rule(table, op):
    assert callable(table.get(op)), f"{op.__name__} has no rule"


@pytest.mark.parametrize("table", [COST_RULES, FIXED_COST_RULES, FUSED_PART_RULES],
                         ids=["COST_RULES", "FIXED_COST_RULES", "FUSED_PART_RULES"])
def test_the_tables_hold_op_classes_of_the_ir_only(table):
    assert set(table) <= set(OPS)


def test_every_op_a_fused_kernel_may_hold_has_a_fused_part_rule():
    # ir.Fused's table: collective stages (ReduceScatter, AllGather, Send; Reduce and
    # Broadcast at their root; a whole AllReduce before row computation; a peer-memory
    # AllToAll) around computation
    fusable = {*ir.FUSABLE_COMPUTATION, ir.ReduceScatter, ir.AllGather, ir.Send, ir.Reduce,
               ir.Broadcast, ir.AllReduce, ir.AllToAll}
    assert set(FUSED_PART_RULES) == fusable


class Bogus:
    """An op class the cost model has no rule for."""


def test_an_op_with_no_cost_rule_is_an_error_naming_it():
    s = SimpleNamespace(name="y", op=Bogus())
    with pytest.raises(WorkbenchError, match=r"^cost model must know op Bogus, got no rule in "
                       r"COST_RULES; add one in cost_model/ops/rules\.py$"):
        stmt_cost(None, s)
    with pytest.raises(WorkbenchError, match=r"^cost model must know op Bogus, got no rule in "
                       r"FIXED_COST_RULES; add one in cost_model/ops/rules\.py$"):
        stmt_fixed_s(None, s)


def test_a_fused_body_with_an_op_that_cannot_be_fused_is_an_error_naming_it():
    matmul = SimpleNamespace(op=object.__new__(ir.MatMul))  # the op's class is what counts
    fused = SimpleNamespace(op=SimpleNamespace(kind="allreduce", body=(matmul,)))
    with pytest.raises(WorkbenchError, match=r"^fused allreduce body must hold collectives and "
                       r"elementwise statements only, got MatMul$"):
        fused_parts(None, fused)


@pytest.mark.parametrize("P, passes", [(1, 7), (4, 1 + 3 * 3 / 4)])
def test_fused_adam_moves_what_the_generated_kernel_moves(P, passes):
    """fuse-rs-c-ag of Adam: this rank's HBM reads g (peers load their slices of it), reads
    m, v and w on its slice and stores them back, and receives the peers' slices of w: the
    reduced gradient stays in registers and its own w slice is stored once (the generated
    kernel; at P = 1 the 7 passes GPU run 30 timed at 9.18 ms on 806M parameters, design
    note 85)."""
    from cost_model.hardware import preset
    from cost_model.ops import CostContext
    from workbench.interpreter import bind_sizes
    from workbench.loader import load

    program = load("studies/adam.py").schedules["fuse-rs-c-ag"].apply()
    N = 2**20
    ctx = CostContext(program, preset("h100x8"), bind_sizes(program, {"N": N, "P": P}))
    work = fused_parts(ctx, program.stmts[0]).work
    assert work.hbm_bytes == passes * 4 * N + 5 * 4  # and the five scalars
