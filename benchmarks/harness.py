"""One command for the GPU benchmark suites (benchmarks/suites.toml holds them as data).

    python benchmarks/harness.py --list
    python benchmarks/harness.py optimizers rows --gpus 2 --out results/run1 [--quick]
    python benchmarks/harness.py all --gpus 1 --out DIR --dry-run     # the commands, nothing run
    python benchmarks/harness.py optimizers --gpus 2 --out DIR --wheels .whl   # offline install
    python benchmarks/harness.py replay-training --gpus 2 --out DIR   # a recorded call again

Run from the repository root on any machine with NVIDIA GPUs and the `gpu` extra installed
(`pip install -e '.[gpu]'`), or with `--wheels DIR`, a folder of wheels (the workbench's and its
dependencies') installed first with `pip --no-index`, for machines without a network. Each run
goes to DIR/NAME.log (stdout and stderr), compile-and-measure writes its CSV/JSON into DIR, and
DIR/manifest.json records the commit, the versions, every command with its environment, exit
code and wall time. A run that fails or times out is recorded and the rest go on; the exit
code is 1 when any failed.

Two kinds of suite: the benchmarks (`all` runs them), and replays (a suite with `record`, the
records/ folder, or list of folders, whose device calls it re-runs: named, never part of
`all`). A training run (`train = CONFIG`, `variants = [...]`) expands into one torchrun of
examples/train_gpt.py per variant, from the `[train]` tables of suites.toml (the
configurations and variants as data).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import signal
import stat
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a relative default: the folder the harness is run from, never the package's own folders
DEFAULT_OUT = Path("workbench-out/harness")
SUITES_FILE = ROOT / "benchmarks" / "suites.toml"


@dataclass(frozen=True)
class Run:
    """One benchmark run of a suite: a compile-and-measure, or a command."""

    suite: str
    name: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    timeout_s: int = 600
    min_gpus: int = 1
    max_gpus: int = 1024


@dataclass(frozen=True)
class Suite:
    """A named list of runs with what it measures."""

    name: str
    about: str
    runs: tuple[dict, ...] = field(default_factory=tuple)
    # the records/ folders of the device calls this suite replays (none: a benchmark)
    records: tuple[str, ...] = ()
    # the [train] tables of the file it was read from (its training runs' configs, variants)
    training: dict = field(default_factory=dict, compare=False)


class SuiteError(ValueError):
    """A suite file or a suite name that is not as expected (exit 2)."""


# What a run of suites.toml may hold: field -> (what it must be, its check). The harness runs
# before the workbench is installed (--wheels), so the checks are the standard library's.
def _strings(v) -> bool:
    return isinstance(v, list) and all(isinstance(a, str) and "\x00" not in a for a in v)


_RUN_FIELDS = {
    "name": ("a plain name (1 to 100 letters, digits, '.', '_', '-'; it names NAME.log)",
             lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", v)
             is not None),
    "programs": ("a non-empty list of program files", lambda v: _strings(v) and len(v) > 0),
    "command": ("a non-empty argv list of strings", lambda v: _strings(v) and len(v) > 0),
    "sizes": ("a list of NAME=VALUE strings", _strings),
    "quick_sizes": ("a list of NAME=VALUE strings", _strings),
    "args": ("a list of strings", _strings),
    "env": ("a table of strings", lambda v: isinstance(v, dict) and all(
        isinstance(x, str) for x in v.values())),
    "timeout_s": ("a whole number of seconds from 1 to 86400",
                  lambda v: type(v) is int and 1 <= v <= 86_400),
    "min_gpus": ("a whole number from 1 to 1024", lambda v: type(v) is int and 1 <= v <= 1024),
    "max_gpus": ("a whole number from 1 to 1024", lambda v: type(v) is int and 1 <= v <= 1024),
    "train": ("the name of a [train.configs.NAME] table", lambda v: isinstance(v, str)),
    "variants": ("a non-empty list of [train.variants.NAME] names",
                 lambda v: _strings(v) and len(v) > 0),
}
_KINDS = ("programs", "command", "train")  # a run is exactly one of these
_PLACEHOLDERS = {"gpus", "out", "python"}  # what a command's strings may name in {...}
SUITES_MAX_BYTES = 1 << 20  # a suites file is a page of text; a larger one is not one


def _records(value, suite: str, path: Path) -> tuple[str, ...]:
    """A suite's `record`: one records/ folder, or a list of them (a suite that re-runs the
    device calls of several runs)."""
    folders = [value] if isinstance(value, str) else value
    if not isinstance(folders, list | tuple) or not all(
            isinstance(f, str) and f.startswith("records/") for f in folders):
        raise SuiteError(f"suite {suite} in {path}: `record` must be a records/ folder or a list"
                         f" of them, got {value!r:.60}; fix the suite file")
    return tuple(folders)


def load_suites(path: Path = SUITES_FILE) -> dict[str, Suite]:
    """The suites of `path`, each run checked for the fields it must have: a file that is not
    what suites.toml should be (not TOML, a field of the wrong type, an unknown field, a run
    name that is not a plain name) is a SuiteError naming the file, the run and the field."""
    try:
        if path.stat().st_size > SUITES_MAX_BYTES:
            raise SuiteError(f"{path} must be at most {SUITES_MAX_BYTES} bytes, got "
                             f"{path.stat().st_size}; is it the suites file?")
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        why = (e.strerror if isinstance(e, OSError) else "not UTF-8" if isinstance(
            e, UnicodeDecodeError) else str(e))
        raise SuiteError(f"{path} must be a readable TOML file of suites, got: {why}; fix the "
                         "suite file") from None
    body_of = data.get("suites", {})
    if not isinstance(body_of, dict):
        raise SuiteError(f"{path}: `suites` must be a table of [suites.NAME], got "
                         f"{type(body_of).__name__}; fix the suite file")
    suites, names = {}, set()  # run names are unique across suites: each names DIR/NAME.log
    for name, body in body_of.items():
        runs = body.get("runs", []) if isinstance(body, dict) else None
        if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
            raise SuiteError(f"suite {name} in {path} must be a table with [[suites.{name}.runs]]"
                             " tables; fix the suite file")
        for i, run in enumerate(runs, 1):
            where = f"run {name}/{run.get('name', i)!s:.60} in {path}"
            unknown = sorted(set(run) - set(_RUN_FIELDS))
            if unknown:
                raise SuiteError(f"{where} must have only the fields {', '.join(_RUN_FIELDS)}, "
                                 f"got {', '.join(unknown)}; fix the suite file")
            for field_name, value in run.items():
                what, ok = _RUN_FIELDS[field_name]
                if not ok(value):
                    raise SuiteError(f"{where}: {field_name} must be {what}, got "
                                     f"{value!r:.60}; fix the suite file")
            if "name" not in run or run["name"] in names:
                raise SuiteError(f"{where} must have a name of its own (it names the run's "
                                 "log); fix the suite file")
            names.add(run["name"])
            if sum(kind in run for kind in _KINDS) != 1:
                raise SuiteError(f"{where} must have exactly one of `programs`, `command` or "
                                 "`train`; fix the suite file")
            if ("train" in run) != ("variants" in run):
                raise SuiteError(f"{where} must have `variants` with `train` and only with it;"
                                 " fix the suite file")
            _check_training(run, data.get("train", {}), where)
            for arg in run.get("command", []):
                try:
                    arg.format(**{k: "" for k in _PLACEHOLDERS})
                except (KeyError, IndexError, ValueError):
                    raise SuiteError(f"{where}: command may fill in only "
                                     f"{{{'}, {'.join(sorted(_PLACEHOLDERS))}}}, got {arg!r:.60}"
                                     "; double a brace to keep it ({{ }})") from None
        suites[name] = Suite(name, str(body.get("about", "")), tuple(runs),
                             _records(body.get("record", ()), name, path),
                             data.get("train", {}))
    return suites


def _check_training(run: dict, train, where: str) -> None:
    """A SuiteError unless a training run's configuration and variants are in [train]."""
    if "train" not in run:
        return
    configs = train.get("configs", {}) if isinstance(train, dict) else {}
    variants = train.get("variants", {}) if isinstance(train, dict) else {}
    if run["train"] not in configs:
        raise SuiteError(f"{where}: train must be one of {', '.join(configs) or 'no configs'}, "
                         f"got {run['train']!r:.60}; add [train.configs.{run['train']:.60}]")
    unknown = [v for v in run["variants"] if v not in variants]
    if unknown:
        raise SuiteError(f"{where}: variants must name [train.variants.NAME] tables, got "
                         f"{', '.join(unknown):.100}; add them or fix the names")


def training_runs(suite: str, r: dict, gpus: int, training: dict) -> list[Run]:
    """A training run's torchruns, one per variant (in the order given), then the loss
    check of every variant against torch's own noise (check_losses.sh; only where the
    variants hold its reference, `ref` or `bf16p`: else no run is judged): CONFIG's model and
    steps, the variant's arguments (the workbench's common ones first where it says
    `workbench = true`), a variant that only P = 1 has (`max_gpus = 1`) left out at larger
    P. The compile scope `split` compiles three pieces first: `split_timeout_s`. `training`:
    the suite file's [train] tables."""
    cfg_name = r["train"]
    cfg, variants = training["configs"][cfg_name], training["variants"]
    common = [*cfg["model"], "--steps", str(cfg["steps"]), "--warmup-steps",
              str(cfg["warmup_steps"])]
    runs = []
    for name in r["variants"]:
        v = variants[name]
        if gpus > v.get("max_gpus", 1024):
            continue
        args = [*(training["workbench_args"] if v.get("workbench") else []), *v["args"]]
        if "split_blocks" in v:  # the graph cut every N blocks: N blocks' parameter bytes
            args += ["--split-mb", str(v["split_blocks"] * cfg["block_mb"])]
        timeout = cfg["split_timeout_s" if v.get("split") else "timeout_s"]
        argv = ("torchrun", f"--nproc_per_node={gpus}", "examples/train_gpt.py", *args,
                *common, "--out", f"{{out}}/{gpus}_{cfg_name}_{name}.json")
        runs.append(Run(suite, f"{r['name']}-{name}", argv, (), timeout))
    if {"ref", "bf16p"} & set(r["variants"]):  # what the check judges against
        runs.append(Run(suite, f"{r['name']}-losses", ("bash", "benchmarks/gpu/check_losses.sh",
                                                        "{out}", str(gpus), cfg_name), (), 120))
    return runs


def plan_runs(suites: dict[str, Suite], names: list[str], gpus: int, out: Path,
              quick: bool) -> list[Run]:
    """The runs of the suites named (`all` for every one), commands filled in."""
    unknown = [n for n in names if n != "all" and n not in suites]
    if unknown:
        raise SuiteError(f"suite must be one of {', '.join(suites)} or all, got "
                         f"{', '.join(unknown)}; see --list")
    benchmarks = [n for n, s in suites.items() if not s.records]  # `all`: no replays
    chosen = [n for n in dict.fromkeys(
        n for name in names for n in (benchmarks if name == "all" else [name]))]
    fill = {"gpus": str(gpus), "out": str(out), "python": sys.executable}
    runs = []
    for suite in chosen:
        for r in suites[suite].runs:
            if "train" in r:
                expanded = training_runs(suite, r, gpus, suites[suite].training)
                runs += [Run(t.suite, t.name, tuple(a.format(**fill) for a in t.argv), t.env,
                             t.timeout_s) for t in expanded]
                continue
            if "command" in r:
                argv = tuple(a.format(**fill) for a in r["command"])
            else:
                sizes = r.get("quick_sizes", r.get("sizes", [])) if quick else r.get("sizes", [])
                argv = (sys.executable, "-m", "workbench", "compile-and-measure",
                        *r["programs"], "--gpus", str(gpus), "--out", str(out),
                        "--name", f"{r['name']}-p{gpus}",
                        *(a for s in sizes for a in ("--set", s)),
                        *(a.format(**fill) for a in r.get("args", [])))
            env = tuple(sorted((k, str(v).format(**fill)) for k, v in r.get("env", {}).items()))
            runs.append(Run(suite, r["name"], argv, env, int(r.get("timeout_s", 600)),
                            int(r.get("min_gpus", 1)), int(r.get("max_gpus", 1024))))
    return runs


def commit() -> str:
    """The checkout's commit, with `+dirty` when files differ from it."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""
    head = git("rev-parse", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def versions() -> dict:
    """Python, platform, and the GPU stack where it imports (torch, CUDA, NCCL, GPUs)."""
    found = {"python": platform.python_version(), "platform": platform.platform()}
    probe = ("import json, torch; print(json.dumps({'torch': torch.__version__, "
             "'cuda': torch.version.cuda, 'gpus': [torch.cuda.get_device_name(i) for i in "
             "range(torch.cuda.device_count())], 'nccl': '.'.join(map(str, "
             "torch.cuda.nccl.version())) if torch.cuda.is_available() else None}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    if done.returncode == 0:
        found.update(json.loads(done.stdout.strip().splitlines()[-1]))
    return found


def install_wheels(folder: Path) -> None:
    """Offline install of the workbench and its `gpu` extra from a folder of wheels."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links",
                    str(folder), "coconet-workbench[gpu]"], check=True)


def _check_output(path: Path) -> None:
    """A SuiteError unless `path` is absent or a regular file: a link, a device or a FIFO
    planted under a log's or the manifest's name is never written through (the harness runs
    as root on the GPU machines)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise SuiteError(f"the output {path} must be a regular file or not exist yet, got "
                         f"{'a symlink' if stat.S_ISLNK(mode) else 'a special file'}; remove "
                         "it or pick another --out")


def _open_output(path: Path):
    """`path` opened for writing (binary, truncated), refusing what _check_output refuses;
    O_NOFOLLOW closes the window between the check and the open for a link."""
    _check_output(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    return os.fdopen(fd, "wb")


def execute(runs: list[Run], gpus: int, out: Path) -> list[dict]:
    """Run each in turn (logs in out/NAME.log); a failure is recorded and the rest go on."""
    records = []
    for run in runs:
        record = {"suite": run.suite, "name": run.name, "command": shlex.join(run.argv),
                  "env": dict(run.env)}
        if not run.min_gpus <= gpus <= run.max_gpus:
            need = (f"{run.min_gpus}" if run.max_gpus >= 1024 else
                    f"{run.min_gpus} to {run.max_gpus}")
            record.update(status=f"skipped: needs {need} GPUs, got {gpus}")
            records.append(record)
            print(f"[{run.suite}/{run.name}] {record['status']}", flush=True)
            continue
        print(f"[{run.suite}/{run.name}] {record['command']}", flush=True)
        t0 = time.monotonic()
        try:
            log_file = _open_output(out / f"{run.name}.log")
        except SuiteError as e:  # recorded, and the rest go on
            record.update(status=f"not run: {e}", wall_s=0.0)
            print(f"[{run.suite}/{run.name}] {record['status']}", flush=True)
            records.append(record)
            continue
        with log_file as log:
            # Its own session, so a timeout ends everything it started (torchrun's ranks, the
            # workbench's launcher and workers), not only the direct child.
            proc = subprocess.Popen(run.argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, **dict(run.env)}, start_new_session=True)
            try:
                returncode = proc.wait(timeout=run.timeout_s)
                record.update(status="ok" if returncode == 0 else "failed",
                              returncode=returncode)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                record.update(status=f"timed out after {run.timeout_s} s")
        record["wall_s"] = round(time.monotonic() - t0, 1)
        print(f"[{run.suite}/{run.name}] {record['status']} ({record['wall_s']} s)", flush=True)
        records.append(record)
    return records


def main(argv: list[str] | None = None) -> int:
    """The harness's command line; exit 0 all ran, 1 some failed, 2 bad input."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suites", nargs="*", help="suite names, or `all`")
    ap.add_argument("--gpus", type=int, default=1, help="ranks, one per GPU (default 1)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help=f"results folder, created (default ./{DEFAULT_OUT}, in the current "
                         "folder: never inside the package or records/)")
    ap.add_argument("--quick", action="store_true", help="each run's quick sizes")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--list", action="store_true", help="list the suites and exit")
    ap.add_argument("--wheels", type=Path, default=None,
                    help="install the workbench[gpu] offline from this folder of wheels first")
    args = ap.parse_args(argv)
    try:
        suites = load_suites(SUITES_FILE)
        if args.list or not args.suites:
            for s in suites.values():
                replays = f" (replays {', '.join(s.records)})" if s.records else ""
                print(f"{s.name:16} {s.about}{replays}")
            return 0
        if args.gpus < 1:
            raise SuiteError(f"--gpus must be at least 1, got {args.gpus}")
        out = args.out.resolve()
        runs = plan_runs(suites, args.suites, args.gpus, out, args.quick)
    except SuiteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        for run in runs:
            env = " ".join(f"{k}={v}" for k, v in run.env)
            print(f"{run.suite}/{run.name}: {env + ' ' if env else ''}{shlex.join(run.argv)}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    if args.wheels:
        install_wheels(args.wheels)
    manifest = {"commit": commit(), "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                              time.gmtime()),
                "command": shlex.join([sys.executable, *sys.argv]), "gpus": args.gpus,
                "versions": versions()}
    manifest["runs"] = execute(runs, args.gpus, out)
    try:
        with _open_output(out / ".manifest.json.tmp") as f:  # whole or not at all
            f.write((json.dumps(manifest, indent=1) + "\n").encode())
        _check_output(out / "manifest.json")
        os.replace(out / ".manifest.json.tmp", out / "manifest.json")
    except SuiteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = [r for r in manifest["runs"] if r["status"] not in ("ok",)
              and not r["status"].startswith("skipped")]
    print(f"{len(manifest['runs']) - len(failed)} of {len(manifest['runs'])} runs ok or skipped; "
          f"manifest: {out / 'manifest.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
