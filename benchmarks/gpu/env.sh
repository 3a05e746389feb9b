# Sourced by every device script (from the repo root, `.whl` carried): the environment each
# process there needs (NVLink multicast must stay off), a timestamped progress line, the
# install of the carried wheels, and where results go.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 WB_CACHE_DIR=/tmp/wb-cubin
REPO=$(pwd)
t0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - t0 )) s] $*"; }
install_wheels() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl || return 1
  export PYTHONPATH=/tmp/site:$REPO
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
