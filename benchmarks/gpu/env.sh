# Sourced by every device script (from the repo root, `.whl` carried): the environment each
# process there needs (NVLink multicast must stay off), a timestamped progress line, the
# install of the carried wheels, and where results go.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The cubin cache is per user and private (workbench.runtime.compiler checks it): never a
# shared /tmp folder, where anyone could plant a cubin the GPU would run.
export PYTHONUNBUFFERED=1 WB_CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/workbench/cubin"
REPO=$(pwd)
t0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - t0 )) s] $*"; }
install_wheels() {
  # Once per machine: lanes that run side by side (`harness.py replay-multi-call*`) must not install into
  # /tmp/site at the same time.
  if [ "${WB_WHEELS_DONE:-}" = 1 ]; then export PYTHONPATH=/tmp/site:$REPO; return 0; fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl || return 1
  export PYTHONPATH=/tmp/site:$REPO
}
ensure_pycuda() {
  # pycuda ships no binary wheel: build it from the carried sdist unless a wheel was carried;
  # the wheel goes to $OUT too, so a later run can carry it and skip the ~90 s build.
  python3 -c "import pycuda.driver" 2>/dev/null && return 0
  stamp "build pycuda from sdist"
  ( cd /tmp && tar xzf "$REPO"/.whl/pycuda-2026.1.tar.gz && cd pycuda-2026.1 \
    && python3 configure.py --cuda-root=/usr/local/cuda \
    && python3 -m pip wheel --no-deps --no-build-isolation -w /tmp/w . ) \
    > "$RES"/pycuda_build.log 2>&1 || { tail -30 "$RES"/pycuda_build.log; return 1; }
  python3 -m pip install -q --no-index --no-deps --target /tmp/site /tmp/w/pycuda*.whl || return 1
  cp /tmp/w/pycuda*.whl "$OUT"/
}
pack_results() {
  # Results and logs go to $RES and come back packed as $OUT/results.tgz (few files come back
  # from the device machine). RES starts empty: a warm machine keeps /tmp between calls.
  # RES_DIR names another folder (a script that runs another inside it).
  OUT=${OUT:-/tmp/wb-out}
  RES=${RES_DIR:-/tmp/wb-res}
  rm -rf "$RES"
  mkdir -p "$OUT" "$RES"
  trap 'tar czf "$OUT"/results.tgz -C "$RES" .' EXIT
}
