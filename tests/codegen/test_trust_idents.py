"""Names reach generated CUDA only through codegen's mangle (issue 26): `a-b` and `a_b` are
distinct C identifiers (they were both `a_b`, and the kernel silently read one for the other),
a name with a newline cannot put text into the source through a comment, and the DSL refuses
such names where the user writes them. Plain names keep their spelling (golden CUDA is
unchanged: test_codegen_golden)."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import workbench.dsl as dsl
from codegen.lower import lower
from codegen.planner import c_ident
from codegen.render import comment_text, render
from workbench import AllReduce, Local, P, Program, Size, Sum, Tensor, float32
from workbench.errors import WorkbenchError

C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@given(st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=30))
def test_c_ident_is_one_to_one_and_a_c_identifier(a, b):
    assert C_IDENT.fullmatch(c_ident(a)) and C_IDENT.fullmatch(c_ident(b))
    assert (c_ident(a) == c_ident(b)) == (a == b)


@pytest.mark.parametrize("name", ["w1", "g1_rs", "m1_s", "_t0", "summed_rs"])
def test_plain_names_keep_their_spelling(name):
    assert c_ident(name) == name


def test_distinct_near_names():
    names = ["a-b", "a_b", "a.b", "a b", "a\nb", "a_b_x" + "0" * 12, c_ident("a-b")]
    assert len({c_ident(n) for n in names}) == len(names)


def _kernels_of(monkeypatch, *names):
    """A program whose inputs have `names` (built with the DSL's name check off, as a program
    made some other way than through the DSL would be), lowered and rendered."""
    monkeypatch.setattr(dsl.trace, "check_name", lambda what, name: name)
    N = Size("N", multiple_of=P)
    a, b = (Tensor(float32, [N], Local, n) for n in names)
    out = AllReduce(Sum, a * 2.0 + b)
    program = Program(inputs=[a, b], outputs=[out])
    return "\n".join(render(k) for k in lower(program, P=2).kernels())


def test_a_dash_and_an_underscore_are_two_inputs_in_the_kernel(monkeypatch):
    source = _kernels_of(monkeypatch, "a-b", "a_b")
    assert re.search(r"a_a_b_x[0-9a-f]{12}", source) and re.search(r"\ba_a_b\b", source)


def test_a_newline_in_a_name_never_reaches_the_source(monkeypatch):
    evil = "x\n#error injected\n//"
    source = _kernels_of(monkeypatch, evil, "y")
    assert "#error injected" not in source.replace("?#error injected", "")
    assert all(not line.startswith("#error") for line in source.splitlines())


def test_comment_text_keeps_one_line():
    assert comment_text("fused g1,w1") == "fused g1,w1"
    assert comment_text("a\nb\\\r\u2028c") == "a?b???c"


@pytest.mark.parametrize("make, message", [
    (lambda: Tensor(float32, [4], Local, "a-b"),
     "Tensor name must be an identifier (letters, digits and _, not starting with a digit), "
     "got 'a-b'; e.g. 'a_b'"),
    (lambda: Tensor(float32, [4], Local, "x\ny"), "Tensor name must be an identifier"),
    (lambda: dsl.Variable(float32, "lr/2"), "Variable name must be an identifier"),
    (lambda: Size("N-1"), "Size name must be an identifier"),
    (lambda: dsl.Stage("s 0"), "Stage name must be an identifier"),
    (lambda: AllReduce(Sum, Tensor(float32, [4], Local, "g"), name="g\n1"),
     "statement name must be an identifier"),
    (lambda: Tensor(float32, [-4], Local, "x"),
     "Tensor x: dim 0 of the shape must be a positive integer or a size expression, got -4; "
     "use a Size (e.g. N = Size('N')) or a positive int"),
    (lambda: Tensor(float32, [4.5], Local, "x"), "dim 0 of the shape must be a positive integer"),
    (lambda: Tensor(float32, [0], Local, "x"), "dim 0 of the shape must be a positive integer"),
    (lambda: Tensor(float32, 4, Local, "x"), "Tensor x: shape must be a list of sizes, got 4"),
    (lambda: Size("N", multiple_of=0),
     "Size N: multiple_of must be a positive integer or a size expression, got 0; e.g. "
     "multiple_of=P"),
    (lambda: Size("N", multiple_of=-3), "Size N: multiple_of must be a positive integer"),
    (lambda: Size("N", multiple_of=2.5), "Size N: multiple_of must be a positive integer"),
])
def test_the_dsl_refuses_bad_names_shapes_and_multiples(make, message):
    with pytest.raises(WorkbenchError) as e:
        make()
    assert message in str(e.value)
