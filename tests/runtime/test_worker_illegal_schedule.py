"""compile-and-measure on a file with one illegal schedule: that schedule's row says why
(`illegal: ...`, as simulate's does) and the others go on (issue 24); each schedule is applied
apart when the program is compiled (codegen.compiled.schedules)."""

import types

from codegen.compiled import schedules
from workbench import Local, P, Program, Size, Sum, Tensor, float32, schedule
from workbench.dsl import AllReduce, Compute
from workbench.errors import WorkbenchError


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

    loaded = types.SimpleNamespace(path="p.py", program=program,
                                   schedules={"bad": bad, "good": good})
    got = dict(schedules(loaded, "all"))
    err = got["bad"]
    assert isinstance(err, WorkbenchError) and str(err).startswith("schedule bad (")
    assert "no_such_value" in str(err)
    assert got["good"] == good.apply() and got["unscheduled"] == program
