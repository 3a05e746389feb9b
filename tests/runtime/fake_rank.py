"""A fake rank for launcher tests (no GPU): behaviour chosen by argv[1] and WB_RANK."""

import os
import subprocess
import sys
import time

mode = sys.argv[1]
rank = int(os.environ["WB_RANK"])
pidfile = sys.argv[2] if len(sys.argv) > 2 else None
if pidfile:
    # A grandchild, to prove the launcher ends what a rank started too.
    # WB_FAKE_SETSID: the grandchild leaves the rank's session (setsid), as a daemonizing
    # helper does.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             start_new_session=bool(os.environ.get("WB_FAKE_SETSID")))
    with open(f"{pidfile}.{rank}", "w") as f:
        f.write(f"{os.getpid()} {child.pid}\n")
print(f"rank {rank} of {os.environ['WB_WORLD_SIZE']} up", flush=True)
if mode == "ok":
    print(f"rank {rank} done", flush=True)
    sys.exit(0)
if mode == "die":
    if rank == 1:
        time.sleep(0.3)
        print("rank 1 fails on purpose", flush=True)
        sys.exit(3)
    time.sleep(600)
if mode == "hang":
    if rank == 1:
        time.sleep(600)  # silent: a hung rank
    while True:  # rank 0 keeps reporting progress
        print("progress", flush=True)
        time.sleep(0.1)
