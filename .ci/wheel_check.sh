#!/usr/bin/env bash
# The package as a user installs it: build the wheel, install it in a clean venv outside the
# checkout (dependencies from the package index, no checkout on the path), run the main job and
# write a schedule's CUDA from there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$root" archive --format=tar HEAD | (mkdir -p "$tmp/src" && tar -x -C "$tmp/src")
python -m pip wheel -q --no-deps -w "$tmp/dist" "$tmp/src"
python -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q "$tmp"/dist/*.whl
cd "$tmp"
"$tmp/venv/bin/workbench" --version
"$tmp/venv/bin/python" -m workbench --help > /dev/null
"$tmp/venv/bin/workbench" simulate studies/adam.py --hardware h200x4
if "$tmp/venv/bin/workbench" compile --help > /dev/null 2>&1; then
  "$tmp/venv/bin/workbench" compile studies/adam.py --gpus 4 --out "$tmp/compiled"
fi
echo "wheel check: ok"
