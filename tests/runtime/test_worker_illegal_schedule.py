"""compile-and-measure on a file with one illegal schedule: that schedule's row says why
(`illegal: ...`, as simulate's does) and the others go on (issue 24); the worker applies each
schedule apart."""

from workbench import Local, P, Program, Size, Sum, Tensor, float32, schedule
from workbench.dsl import AllReduce, Compute
from workbench.errors import WorkbenchError
from workbench.runtime.worker import _applied


def test_an_illegal_schedule_is_its_error_and_a_legal_one_its_program():
    N = Size("N", multiple_of=P)
    g = Tensor(float32, [N], Local, "g")
    g1 = AllReduce(Sum, g)
    out = Compute(g1 * 2.0, name="out")
    program = Program(inputs=[g], outputs=[out], name="p")

    @schedule(program)
    def bad(s):
        s.fuse(g1, "no_such_value")

    @schedule(program)
    def good(s):
        s.split(g1)

    err = _applied(bad)
    assert isinstance(err, WorkbenchError) and str(err).startswith("schedule bad (")
    assert "no_such_value" in str(err)
    assert _applied(good) == good.apply()
