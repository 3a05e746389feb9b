"""GPU run 44 call 24: why does a SIGKILLed launcher's mpirun job outlive 2 s on the device
machine? The test's scenario, with every survivor's /proc status printed over 5 s."""
import os, signal, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path.cwd()
FAKE = str(ROOT / "tests/runtime/fake_rank.py")
tmp = Path(tempfile.mkdtemp(prefix="diag-"))
(tmp / "t").mkdir()
code = ("import sys; from workbench.runtime.launcher import launch; "
        f"launch(2, [sys.executable, {FAKE!r}, 'hang', {str(tmp / 'pids')!r}], "
        f"hang_s=60, launcher='mpirun')")
env = {**os.environ, "TMPDIR": str(tmp / "t")}
def status(pid):
    try:
        st = {l.split(":")[0]: l.split(":", 1)[1].strip() for l in open(f"/proc/{pid}/status")}
        cmd = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")[:90]
        sid = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[3]
        return f"{pid} {st['State']} ppid {st['PPid']} sid {sid} ign {st['SigIgn']} blk {st['SigBlk']} cgt {st['SigCgt']} :: {cmd}"
    except OSError:
        return None
print("self:", status(os.getpid()))
print("pid 1:", status(1))
proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL, env=env)
deadline = time.time() + 30
while not all((tmp / f"pids.{r}").exists() for r in range(2)) and time.time() < deadline:
    time.sleep(0.1)
time.sleep(0.5)
pids = [int(x) for r in range(2) for x in (tmp / f"pids.{r}").read_text().split()]
tree = subprocess.run(["ps", "-eo", "pid,ppid,sid,stat,cmd"], capture_output=True, text=True).stdout
print("\n".join(l[:150] for l in tree.splitlines() if "fake_rank" in l or "mpirun" in l or "prte" in l or "watchdog" in l or "sleep(600)" in l))
for p in pids: print("before:", status(p))
job = [int(l.split()[0]) for l in tree.splitlines()[1:] if str(tmp) in l or "prterun" in l or "prted" in l or "--reap" in l]
pids = sorted(set(pids) | set(job))
t0 = time.monotonic(); proc.send_signal(signal.SIGKILL); proc.wait()
for at in (0.3, 1.0, 2.0, 3.0, 5.0):
    time.sleep(max(0, at - (time.monotonic() - t0)))
    alive = [s for s in map(status, pids) if s and " Z " not in s]
    print(f"t={at}s alive {len(alive)}"); [print("   ", s) for s in alive]
    if not alive: break
time.sleep(0.5)
print("session folders left:", os.listdir(tmp / "t"))
