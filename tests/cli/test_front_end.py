"""The front end never drops input silently and never leaks a traceback: every bad input is
exit 2 with one message naming the thing and the fix (pinned here), and a hypothesis fuzz of
generated `--set` values, program files, schedules, hardware profiles and replay files accepts
only a clean run or that exit 2."""

from __future__ import annotations

import json
import string
import textwrap

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.cli.main import main
from workbench.loader import parse_size

SGD = str(ROOT / "studies/sgd.py")


def run_cli(capsys, *args):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_clean_or_one_error(code: int, err: str) -> None:
    """What every front-end run must end in: exit 0, or exit 2 with one `error:` message."""
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err, err
    if code == 2:
        assert err.startswith("error: ") or err.startswith("Error: ") or "Usage:" in err, err


# -- pinned messages


@pytest.mark.parametrize("value, why", [
    ("__import__('os').getpid()", "call is not integer arithmetic"),
    ("[4]", "list is not integer arithmetic"),
    ("2**28/3", "/ is true division; use //"),
    ("9**9**9", "a power too large or negative"),
    ("2**", "not an expression"),
])
def test_set_values_are_parsed_never_evaluated(capsys, value, why):
    code, out, err = run_cli(capsys, "check", SGD, "--set", f"N={value}")
    assert code == 2
    assert err == (f"error: --set N must be a positive integer expression such as 2**28 "
                   f"(integers with + - * // % ** only), got {value!r} ({why})\n")


def test_set_values_that_are_integer_arithmetic():
    assert parse_size("2**28") == 2**28
    assert parse_size(" 3 * 2**20 + (8 // 2) % 3 ") == 3 * 2**20 + 1
    assert parse_size("-4") == -4  # parse_sets then refuses it as not positive


def test_unknown_size_names_are_an_error_listing_the_known_ones(capsys):
    code, _, err = run_cli(capsys, "simulate", SGD, "--set", "n=2**20")
    assert (code, err) == (2, "error: --set must name sizes of program sgd, got n; known: N, "
                              "P\n")


def test_check_verifies_the_default_sizes(capsys, tmp_path):
    path = tmp_path / "odd.py"
    path.write_text(textwrap.dedent("""\
        from workbench import *
        N = Size("N", multiple_of=P)
        sizes = {"N": 1001}
        g = Tensor(float32, [N], Local, "g")
        program = Program(inputs=[g], outputs=[AllReduce(Sum, g)])
        """))
    code, _, err = run_cli(capsys, "check", path)
    assert (code, err) == (2, "error: size N must be a multiple of P = 4, got 1001; pad it to "
                              "N = 1004\n")
    code, out, _ = run_cli(capsys, "check", SGD)
    assert code == 0 and out.endswith("sizes N=268435456, P=4 ok on h200x4\n")


def test_sizes_of_the_wrong_type_are_named(capsys, tmp_path):
    path = tmp_path / "typo.py"
    path.write_text('from workbench import *\nN = Size("N")\nsizes = {"N": "big"}\n'
                    'w = Tensor(float32, [N], Replicated, "w")\n'
                    'program = Program(inputs=[w], outputs=[w])\n')
    code, _, err = run_cli(capsys, "check", path)
    assert code == 2
    assert err == (f"error: `sizes` in {path} must be a dict of size names to positive ints "
                   "like {'N': 2**28}, got the entry 'N': 'big'\n")


@pytest.mark.parametrize("option", ["--csv", "--json", "--trace"])
def test_output_files_are_checked_before_any_work(capsys, tmp_path, option):
    target = tmp_path / "missing" / "out.csv"
    code, out, err = run_cli(capsys, "simulate", SGD, option, target)
    assert code == 2 and out == ""
    assert err == (f"error: {option} must be in an existing folder, got {target} (no folder "
                   f"{target.parent}); create it first: mkdir -p {target.parent}\n")


def test_an_output_file_that_is_a_folder(capsys, tmp_path):
    code, _, err = run_cli(capsys, "simulate", SGD, "--csv", tmp_path)
    assert code == 2 and f"Invalid value for '--csv': File '{tmp_path}' is a directory" in err
    code, _, err = run_cli(capsys, "sweep", "steps", SGD, "--out", tmp_path)
    assert code == 2 and err.startswith(f"error: --out must name a file, got the folder "
                                        f"{tmp_path}")


def test_out_folders_that_are_files(capsys, tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("")
    code, _, err = run_cli(capsys, "sweep", "predict", "--out", a_file)
    assert (code, err) == (2, f"error: --out must name a folder, got the file {a_file}; pick "
                              "a folder\n")


@pytest.mark.parametrize("text", ["{}", "", "null"])
def test_a_profile_that_sets_nothing_is_an_error(capsys, tmp_path, text):
    path = tmp_path / "empty.json"
    path.write_text(text)
    code, _, err = run_cli(capsys, "simulate", SGD, "--hardware", path)
    assert code == 2 and err.startswith(f"error: hardware profile {path} must ")


def test_debug_after_the_subcommand_shows_the_traceback(capsys):
    with pytest.raises(Exception, match="--set must name sizes of program sgd"):
        main(["simulate", SGD, "--set", "n=4", "--debug"])


def _two_schedules(tmp_path):
    path = tmp_path / "two.py"
    path.write_text(textwrap.dedent("""\
        from workbench import *
        N = Size("N", multiple_of=P)
        sizes = {"N": 2**20}
        g = Tensor(float32, [N], Local, "g")
        w = Tensor(float32, [N], Replicated, "w")
        g1 = AllReduce(Sum, g)
        w1 = Update(w, w - 0.1 * g1)
        program = Program(inputs=[g, w], outputs=[w1])

        @schedule(program)
        def good(s):
            s.split(g1)

        @schedule(program)
        def bad(s):
            s.fuse(g1, w1, kind="send")
        """))
    return path


def test_simulate_shows_an_illegal_schedule_as_a_row_and_goes_on(capsys, tmp_path):
    code, out, err = run_cli(capsys, "simulate", _two_schedules(tmp_path))
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert set(rows) == {"unscheduled", "good", "bad"}
    assert "NaN" in rows["bad"] and "illegal: " in rows["bad"]
    assert "schedule bad is illegal: " in err


def test_schedules_shows_an_illegal_schedule_and_goes_on(capsys, tmp_path):
    code, out, err = run_cli(capsys, "schedules", _two_schedules(tmp_path))
    assert code == 0
    assert "ILLEGAL: " in out and "= split(" in out
    assert "1 illegal schedule(s)" in err


# -- the fuzz

_SET_ALPHABET = string.digits + "*+-/%() _xN=[]'.e"


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.text(alphabet=_SET_ALPHABET, max_size=12))
def test_fuzz_set_values(capsys, value):
    code, _, err = run_cli(capsys, "check", SGD, "--set", f"N={value}")
    assert_clean_or_one_error(code, err)


# A small grammar of DSL programs, most of them wrong: layouts, shapes, dtypes, group sizes,
# names and ops drawn at random.
_LAYOUTS = ["Local", "Replicated", "Sliced(0)", "Sliced(1)", "Sliced(2)", "3", "None"]
_DTYPES = ["float32", "float16", "bfloat16", "int32", "'f32'"]
_SHAPES = ["[N]", "[N, M]", "[M, N]", "[4]", "[]", "[N * 2]", "[0]", "['N']"]
_OPS = ["AllReduce(Sum, {a})", "ReduceScatter(Sum, {a})", "AllGather({a})",
        "Broadcast({a}, root=0)", "Reduce(Sum, {a}, root=1)", "Compute({a} + {b})",
        "Compute({a} * {b} - sqrt({a}))", "MatMul({a}, {b})", "Norm({a})",
        "ReduceTensor(Max, {a})", "Update({a}, {b})", "Cast(float16, {a})",
        "Dropout(0.1, {a})", "Send({a}, 1)"]


@st.composite
def programs(draw):
    lines = ["from workbench import *", 'N = Size("N", multiple_of=P)', 'M = Size("M")',
             'sizes = {"N": 64, "M": 8}']
    names = []
    for i in range(draw(st.integers(1, 3))):
        lines.append(f"t{i} = Tensor({draw(st.sampled_from(_DTYPES))}, "
                     f"{draw(st.sampled_from(_SHAPES))}, {draw(st.sampled_from(_LAYOUTS))}, "
                     f"'t{i}')")
        names.append(f"t{i}")
    inputs = list(names)
    for j in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(_OPS))
        a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        lines.append(f"v{j} = {op.format(a=a, b=b)}")
        names.append(f"v{j}")
    outs = draw(st.lists(st.sampled_from(names), min_size=0, max_size=2, unique=True))
    lines.append(f"program = Program(inputs=[{', '.join(inputs)}], outputs=[{', '.join(outs)}])")
    transforms = ["s.split({x})", "s.reorder({x}, before={y})", "s.fuse({x}, {y})",
                  "s.as_slice({x})", "s.overlap({x}, {y}, chunks={k})", "s.dce()",
                  "s.fuse({x}, kind='allreduce')", "s.copy_engines({x}, chunks={k})"]
    for k in range(draw(st.integers(0, 2))):
        lines.append("@schedule(program)")
        lines.append(f"def sched{k}(s):")
        for _ in range(draw(st.integers(1, 3))):
            t = draw(st.sampled_from(transforms))
            lines.append("    " + t.format(x=draw(st.sampled_from(names + ["'nope'", "3"])),
                                           y=draw(st.sampled_from(names)),
                                           k=draw(st.integers(-1, 5))))
    return "\n".join(lines) + "\n"


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source=programs())
def test_fuzz_programs_and_schedules(capsys, tmp_path, source):
    path = tmp_path / "fuzzed.py"
    path.write_text(source)
    for command in (["check", path], ["schedules", path], ["simulate", path]):
        code, _, err = run_cli(capsys, *command)
        assert_clean_or_one_error(code, err)
        if command[0] == "check" and code == 2:
            break  # a program that does not verify: schedules/simulate say the same


_FIELDS = ["base", "gpus_per_node", "nodes", "gpu", "nvlink", "nic", "nccl", "name",
           "peer_load_bandwidth_Bps", "copy_engine_bandwidth_Bps", "fused_fixed_s"]
_SUBFIELDS = ["bandwidth_Bps", "latency_s", "hbm_bandwidth_Bps", "sm_count", "launch_latency_s",
              "max_channels", "protocols", "nonsense"]
_VALUES = st.one_of(st.integers(-3, 10**12), st.floats(allow_nan=True), st.text(max_size=5),
                    st.none(), st.booleans(), st.lists(st.integers(), max_size=2),
                    st.sampled_from(["h200x4", "h100x8", "nope"]))


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(profile=st.one_of(
    st.dictionaries(st.sampled_from(_FIELDS), st.one_of(
        _VALUES, st.dictionaries(st.sampled_from(_SUBFIELDS), _VALUES, max_size=3)), max_size=4),
    _VALUES))
def test_fuzz_hardware_profiles(capsys, tmp_path, profile):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    code, _, err = run_cli(capsys, "simulate", SGD, "--hardware", path, "--set", "N=2**20")
    assert_clean_or_one_error(code, err)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=st.one_of(
    _VALUES,
    st.fixed_dictionaries({"program": st.sampled_from(["sgd", "adam", 3]),
                           "candidates": st.one_of(_VALUES, st.lists(st.dictionaries(
                               st.sampled_from(["name", "transforms", "x"]),
                               st.one_of(_VALUES, st.lists(st.dictionaries(
                                   st.sampled_from(["name", "values", "before", "chunks"]),
                                   _VALUES, max_size=3), max_size=2)), max_size=3),
                               max_size=2))})))
def test_fuzz_replay_files(capsys, tmp_path, record):
    path = tmp_path / "candidates.json"
    path.write_text(json.dumps(record))
    code, _, err = run_cli(capsys, "schedules", SGD, "--replay", path)
    assert_clean_or_one_error(code, err)


def test_schedules_made_in_a_builder_function_are_found(capsys, tmp_path):
    path = tmp_path / "builder.py"
    path.write_text(textwrap.dedent("""\
        from workbench import *
        N = Size("N", multiple_of=P)
        sizes = {"N": 2**20}

        def build():
            g = Tensor(float32, [N], Local, "g")
            w = Tensor(float32, [N], Replicated, "w")
            g1 = AllReduce(Sum, g)
            w1 = Update(w, w - 0.1 * g1)
            program = Program(inputs=[g, w], outputs=[w1])

            @schedule(program)
            def split_only(s):
                s.split(g1)

            return program

        program = build()
        """))
    code, out, _ = run_cli(capsys, "schedules", path)
    assert code == 0 and "1 named schedule(s)" in out and "split-only" in out


def test_a_schedule_error_names_the_schedule_and_its_line(capsys, tmp_path):
    path = _two_schedules(tmp_path)
    code, _, err = run_cli(capsys, "check", path)
    assert code == 2
    assert err.startswith("error: schedule bad (two.py:16): ")
