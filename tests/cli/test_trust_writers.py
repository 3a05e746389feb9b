"""Every writer is atomic and confined (issue 40, writers): a target that is a device node, a
FIFO, a socket, a folder or a symlink is refused with the reason and never replaced or written
through (run as root, `--json /dev/null` used to replace the system's /dev/null with a regular
file); `compile --out` writes through the one atomic writer under a lock for the whole run;
names that become files (schedule names, `--name`) are plain names, checked where given.

The device nodes here are made under tmp_path (os.mknod as root, else skipped): the real
/dev/null is never a test target."""

import os
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workbench.cli import sweep as sweep_cli
from workbench.cli.main import main
from workbench.cli.outputs import output_lock
from workbench.errors import WorkbenchError
from workbench.files import check_name, write_atomic

PROGRAM = textwrap.dedent("""
    from workbench import *
    N = Size("N", multiple_of=P)
    g = Tensor(float32, [N], Local, "g")
    g1 = AllReduce(Sum, g)
    program = Program(inputs=[g], outputs=[g1])
    sizes = {{"N": 1024}}

    @schedule(program, name={name!r})
    def split(s):
        s.split(g1)
""")


def _node(tmp_path: Path, kind: str) -> Path:
    """A file of `kind` at tmp_path/kind: a character device (/dev/null's numbers), a FIFO, a
    socket or a folder."""
    path = tmp_path / kind
    if kind == "chardev":
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("making a device node needs root")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    else:
        path.mkdir()
    return path


KINDS = {"chardev": "a character device", "fifo": "a FIFO", "socket": "a socket",
         "folder": "a folder"}


@pytest.mark.parametrize("kind", list(KINDS))
def test_write_atomic_refuses_what_is_not_a_regular_file(tmp_path, kind):
    path = _node(tmp_path, kind)
    mode = os.lstat(path).st_mode
    with pytest.raises(WorkbenchError, match=f"the output {path} must be a regular file or not "
                       f"exist yet, got {KINDS[kind]}, which the workbench never replaces or "
                       "writes through; name a regular file"):
        write_atomic(path, "x")
    assert os.lstat(path).st_mode == mode  # still the node it was
    assert [p.name for p in tmp_path.iterdir()] == [kind]  # no temporary file left


@pytest.mark.parametrize("where", ["as the file is made", "while it is written",
                                   "before the rename"])
def test_ctrl_c_anywhere_in_write_atomic_leaves_no_temporary_file(tmp_path, monkeypatch, where):
    """A SIGINT landing just after the temporary file was made, before its name reached the
    writer (tempfile.mkstemp's window), left a `.plan.txt.*.tmp` in a clean clone's CI at
    cb8eeae; the name is now known before the file exists."""
    from workbench import files

    real = {"as the file is made": (files.os, "open"), "while it is written": (files.os, "fsync"),
            "before the rename": (files.os, "replace")}[where]
    called = getattr(*real)

    def interrupted(*args, **kwargs):
        called(*args, **kwargs) if where == "as the file is made" else None
        raise KeyboardInterrupt

    (tmp_path / "a.csv").write_text("old")
    monkeypatch.setattr(*real, interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "a.csv", "new")
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["a.csv"]
    assert (tmp_path / "a.csv").read_text() == "old"


def test_write_atomic_gives_what_open_gives(tmp_path):
    write_atomic(tmp_path / "a.csv", "x")
    (tmp_path / "b.csv").write_text("x")
    assert stat.S_IMODE(os.stat(tmp_path / "a.csv").st_mode) == stat.S_IMODE(
        os.stat(tmp_path / "b.csv").st_mode)


def test_write_atomic_refuses_a_symlinked_out_folder(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "out").symlink_to(real)
    with pytest.raises(WorkbenchError, match=f"the output folder {tmp_path / 'out'} must be a "
                       "real folder, got a symlink; the workbench never writes through a link"):
        write_atomic(tmp_path / "out" / "a.csv", "x", inside=tmp_path / "out")
    assert list(real.iterdir()) == []


@pytest.mark.parametrize("option", [["simulate", "studies/sgd.py", "--json"],
                                    ["simulate", "studies/sgd.py", "--csv"],
                                    ["simulate", "studies/sgd.py", "--trace"],
                                    ["schedules", "studies/sgd.py", "--json"],
                                    ["simulate-step", "--json"],
                                    ["sweep", "steps", "README.md", "--out"]])
def test_a_device_node_as_an_output_is_refused_before_any_work(tmp_path, capsys, option):
    """`--json /dev/null` as root replaced the system's /dev/null; now exit 2, one message,
    and the node stays a character device."""
    node = _node(tmp_path, "chardev")
    code = main([*option, str(node)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"the output {node} must be a regular file or not exist yet, got a character " \
           "device" in err
    assert stat.S_ISCHR(os.lstat(node).st_mode)


def _compile(capsys, out, *args, program="studies/sgd.py"):
    code = main(["compile", program, "--gpus", "2", "--out", str(out), "--no-nvcc",
                 "--set", "N=2**20", *args])
    return code, capsys.readouterr().err


def test_compile_never_writes_through_a_link_in_its_out_folder(tmp_path, capsys):
    """`ln -s ~/.bashrc D/manifest.json` used to overwrite the target."""
    secret = tmp_path / "bashrc"
    secret.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").symlink_to(secret)
    code, err = _compile(capsys, out)
    assert code == 2 and f"the output {out / 'manifest.json'} must be a regular file" in err
    assert secret.read_text() == "keep"


def test_compile_never_writes_into_a_symlinked_schedule_folder(tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "unscheduled").symlink_to(elsewhere)
    code, err = _compile(capsys, out)
    assert code == 2 and f"the output folder {out / 'unscheduled'} must be a real folder, " \
                         "got a symlink" in err
    assert list(elsewhere.iterdir()) == []


def test_compile_refuses_a_symlinked_out(tmp_path, capsys):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "out").symlink_to(real)
    code, err = _compile(capsys, tmp_path / "out")
    assert code == 2 and f"--out must be a real folder, got {tmp_path / 'out'}, a symlink" in err
    assert list(real.iterdir()) == []


def test_compile_holds_its_out_folder(tmp_path, capsys):
    """Two compiles into one folder mixed one program's kernels with the other's plan."""
    with output_lock(tmp_path, "--out"):
        code, err = _compile(capsys, tmp_path)
    assert code == 2 and f"--out must be a folder no other run is writing to, got {tmp_path}" \
                         in err
    assert list(tmp_path.iterdir()) == []


def test_compile_under_a_file_size_limit_names_the_file_and_leaves_none_cut(tmp_path):
    out = tmp_path / "out"
    script = textwrap.dedent(f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))
        from workbench.cli.main import main
        sys.exit(main(["compile", "studies/sgd.py", "--gpus", "2", "--out", {str(out)!r},
                       "--no-nvcc"]))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    last = run.stderr.splitlines()[-1]
    assert last.startswith("error: File too large (") and "no file name" not in last
    named = Path(last[len("error: File too large ("):last.index(")")])
    assert named.parent.parent == out and not named.exists()  # never left half-written
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_sweep_predict_holds_its_out_folder_for_the_whole_run(tmp_path, capsys, monkeypatch):
    """The lock was taken only around the final write: two sweeps both exited 0 and one's rows
    were lost. Now a second run is refused while the first still simulates."""
    seen = []
    real = sweep_cli.predict_rows

    def predict_rows(*args):
        seen.append(main(["sweep", "predict", "--study", "sgd", "--out", str(tmp_path)]))
        return real(*args)

    monkeypatch.setattr(sweep_cli, "predict_rows", predict_rows)
    assert main(["sweep", "predict", "--study", "sgd", "--out", str(tmp_path)]) == 0
    assert seen == [2]
    assert "which another workbench run holds" in capsys.readouterr().err


@pytest.mark.parametrize("name, why", [("..", "a path of its own"), ("", "empty"),
                                       ("a/b", "a path separator"),
                                       ("x\ny", "a control character"),
                                       ("x" * 5000, "5000 characters")])
def test_a_schedule_name_that_is_not_a_plain_name_is_refused_at_load(tmp_path, capsys, name,
                                                                      why):
    """`@schedule(program, name='..')` made `compile --out a/out` write into `a/`."""
    f = tmp_path / "prog.py"
    f.write_text(PROGRAM.format(name=name))
    code = main(["check", str(f)])
    err = capsys.readouterr().err
    assert code == 2 and "a schedule's name (@schedule(program, name=...)) must be a plain " \
                         "name" in err and f"({why})" in err
    assert len(err) < 600  # the 5,000 characters are not echoed


def test_compile_and_measure_name_must_be_a_plain_name(tmp_path, capsys):
    code = main(["compile-and-measure", "studies/sgd.py", "--gpus", "1", "--out",
                 str(tmp_path / "out"), "--name", "../x"])
    err = capsys.readouterr().err
    assert code == 2 and "--name must be a plain name" in err and "(a path separator)" in err
    assert list(tmp_path.iterdir()) == []


def test_check_name_passes_plain_names():
    for name in ["fused", "fuse-rs-c-ag", "auto:split+fuse#2", "a.b", "..x"]:
        assert check_name(name, "x", "y") == name


@pytest.mark.parametrize("command", [["simulate", "studies/sgd.py"],
                                     ["simulate-step", "--d-model", "64", "--layers", "1"]])
def test_two_outputs_naming_one_file_are_refused(tmp_path, capsys, command):
    """`--csv X --json X` kept one of the two without a word (issue 40)."""
    x = tmp_path / "x"
    code = main([*command, "--csv", str(x), "--json", str(x)])
    err = capsys.readouterr().err
    assert code == 2 and f"--json must name a file of its own, got {x}, which --csv names " \
                         "too" in err
    assert not x.exists()


def test_sweep_measured_and_report_hold_their_folder_for_the_whole_run(tmp_path, capsys,
                                                                        monkeypatch):
    """While one run reads and computes, a second into the same folder is refused."""
    from workbench.cli import report as report_cli

    seen = []
    real_rows, real_build = sweep_cli.measured_rows, report_cli.build_report

    def measured_rows(paths):
        seen.append(main(["report", str(tmp_path)]))
        return real_rows(paths)

    def build_report(folder):
        seen.append(main(["sweep", "predict", "--study", "sgd", "--out", str(tmp_path)]))
        return real_build(folder)

    monkeypatch.setattr(sweep_cli, "measured_rows", measured_rows)
    monkeypatch.setattr(report_cli, "build_report", build_report)
    results = tmp_path / "r.csv"
    results.write_text("program,schedule\n")
    main(["sweep", "measured", str(results), "--out", str(tmp_path)])
    (tmp_path / "predicted.csv").write_text("study,schedule,size,gpus,predicted_s\n"
                                            "sgd,unscheduled,N=2^20,4,0.001\n")
    assert main(["report", str(tmp_path)]) == 0
    assert seen == [2, 2]
    assert capsys.readouterr().err.count("which another workbench run holds") == 2
