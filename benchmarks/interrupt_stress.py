"""Ctrl-C and SIGTERM at random points of the workbench's commands, many times over: what a
user's interrupt, `timeout` or a batch scheduler's preemption leaves behind.

Each run starts `workbench ARGS` as the console script does (in a session of its own, with a
fresh --out folder and a fresh TMPDIR), sends the signal to its process group a uniform random
delay after the command's entry point starts, and judges the end (`problem`): the exit is 0
(it finished first), 130 or 143 with the one line, or death by the signal (it landed while
the interpreter shut down); no traceback; nothing left in --out but the lock file, nothing in
its TMPDIR. tests/cli/test_trust_interrupt.py runs a few of these; this runs as many as asked.

    python benchmarks/interrupt_stress.py [--runs 20] [--signals int,term] [--span 3]
        [--seed 1] [COMMAND ...]

Prints one line per command (runs, bad) and each bad run's delay, exit and what was wrong;
exits 1 if any run was bad. On a 2-core machine a run takes 1-10 s (`report` the longest).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# command -> (its arguments for an --out folder, the exits of a run that finished first)
COMMANDS = {
    "simulate": (lambda out: ["simulate", "studies/adam.py", "--hardware", "h200x4", "--json",
                              str(out / "s.json"), "--csv", str(out / "s.csv"), "--quiet"],
                 (0,)),
    "compile": (lambda out: ["compile", "studies/sgd.py", "--gpus", "2", "--out", str(out),
                             "--no-nvcc", "--quiet"], (0,)),
    "sweep-predict": (lambda out: ["sweep", "predict", "--hardware", "h200x4", "--out",
                                   str(out)], (0,)),
    "simulate-step": (lambda out: ["simulate-step", "--json", str(out / "s.json")], (0,)),
    "schedules": (lambda out: ["schedules", "studies/adam.py", "--json", str(out / "s.json")],
                  (0,)),
    "check-equivalence": (lambda out: ["check", "studies/adam.py", "--equivalence"], (0,)),
    # on a machine without GPUs it ends with exit 2 once its plans are made
    "compile-and-measure": (lambda out: ["compile-and-measure", "studies/adam.py", "--gpus",
                                         "2", "--out", str(out)], (0, 2)),
    "report": (lambda out: ["report", str(_results_copy(out))], (0,)),
}
ANSWERS = {signal.SIGINT: (130, "error: interrupted; an output it had not yet reported was "
                                "not written"),
           signal.SIGTERM: (143, "error: terminated (SIGTERM); an output it had not yet "
                                 "reported was not written")}

# `workbench ARGS` as the console script runs it, saying on stderr when its entry point starts.
READY = "entry point running"
ENTRY = ("import sys; from workbench.cli.entry import run; sys.argv[0] = 'workbench'; "
         f"print({READY!r}, file=sys.stderr, flush=True); run()")


def _results_copy(out: Path) -> Path:
    """A measured results folder for `report` to redraw, copied into `out`."""
    shutil.copytree(ROOT / "records/h200x4-run38-preset", out, dirs_exist_ok=True)
    return out


def interrupted(args: list[str], delay_s: float, sig: int = signal.SIGINT,
                tmpdir: Path | None = None) -> subprocess.CompletedProcess:
    """`workbench ARGS` in its own session (TMPDIR `tmpdir` if given), `sig` to its group
    `delay_s` after its entry point starts (as a terminal's Ctrl-C reaches the foreground
    job, or a batch scheduler's SIGTERM the job)."""
    env = dict(os.environ, **({"TMPDIR": str(tmpdir)} if tmpdir is not None else {}))
    proc = subprocess.Popen([sys.executable, "-c", ENTRY, *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    first = proc.stderr.readline()
    if first.strip() != READY:
        proc.kill()
        raise RuntimeError(f"the command must say {READY!r} first, got {first!r}")
    time.sleep(delay_s)
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass  # it finished first
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def leftovers(out: Path, tmpdir: Path | None = None) -> list[str]:
    """What a run left: hidden or .tmp files in its --out folder (the lock file excepted) and
    anything in its TMPDIR."""
    left = [p.name for p in out.rglob("*")
            if p.name.startswith(".") and p.name != ".workbench.lock" or p.suffix == ".tmp"]
    return left + ([str(p.relative_to(tmpdir)) for p in tmpdir.rglob("*")] if tmpdir else [])


def problem(done: subprocess.CompletedProcess, sig: int, left: list[str],
            finished: tuple[int, ...] = (0,)) -> str:
    """What is wrong with a run that `sig` ended ('' when nothing)."""
    code, line = ANSWERS[sig]
    if done.returncode not in (*finished, code, -sig):
        return f"exit {done.returncode}: {done.stderr[-600:]}"
    if "Traceback" in done.stderr:
        return f"a traceback: {done.stderr[-800:]}"
    if done.returncode == code and done.stderr.strip().splitlines()[-1:] != [line]:
        return f"not the one line: {done.stderr[-400:]}"
    return f"left {left[:10]}" if left else ""


def stress(command: str, runs: int, signals: list[int], span_s: float, rng: random.Random,
           root: Path) -> list[str]:
    """`runs` runs of `command`, each ended by a signal of `signals` at a delay uniform in
    [0, span_s]; the bad runs, described."""
    args_for, finished = COMMANDS[command]
    bad = []
    for i in range(runs):
        sig, delay = rng.choice(signals), rng.uniform(0.0, span_s)
        out, tmp = root / f"{command}-{i}-out", root / f"{command}-{i}-tmp"
        out.mkdir()
        tmp.mkdir()
        done = interrupted(args_for(out), delay, sig, tmp)
        why = problem(done, sig, leftovers(out, tmp), finished)
        if why:
            bad.append(f"{signal.Signals(sig).name} at {delay:.3f} s: {why}")
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return bad


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commands", nargs="*", default=["simulate", "compile", "sweep-predict"],
                        choices=sorted(COMMANDS), metavar="COMMAND")
    parser.add_argument("--runs", type=int, default=20, help="runs per command")
    parser.add_argument("--signals", default="int,term", help="int, term or int,term")
    parser.add_argument("--span", type=float, default=3.0,
                        help="the latest delay after the entry point starts, in seconds")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    names = {"int": signal.SIGINT, "term": signal.SIGTERM}
    try:
        signals = [names[s.strip()] for s in args.signals.split(",")]
    except KeyError as e:
        parser.error(f"--signals must name int or term, got {e}")
    rng = random.Random(args.seed)
    failed = False
    with tempfile.TemporaryDirectory(prefix="wb-stress-") as root:
        for command in args.commands:
            bad = stress(command, args.runs, signals, args.span, rng, Path(root))
            print(f"{command}: {args.runs} runs, {len(bad)} bad", flush=True)
            for line in bad:
                print(f"  {line}", flush=True)
            failed |= bool(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
