#!/usr/bin/env bash
# Installs the Debian packages timitseg builds against (run as root, or with sudo
# available). The CUDA toolkit is optional: without it the CPU parts build.
# apt-get waits up to TIMITSEG_APT_LOCK_TIMEOUT seconds (default 600) for a
# dpkg lock that another package manager holds.
set -euo pipefail
pkgs=(cmake g++ make pkg-config libsndfile1-dev libsoxr-dev libeigen3-dev libcli11-dev libyaml-cpp-dev
      nlohmann-json3-dev libspdlog-dev libgtest-dev libbenchmark-dev libssl-dev zlib1g-dev
      flite1-dev
      libespeak-ng-dev espeak-ng-data  # synth --voice espeak (any language) and align --g2p espeak
      libopenmpi-dev openmpi-bin  # training on several processes (mpirun; docs/multigpu.md) and its CI tests
      libboost-math-dev  # header-only Boost.Math: compare's t-test and sign test
      chromium)  # chromium: the headless-browser test of the HTML report (tests/app)
pkgs+=(python3)  # tests/docs/run_doc_blocks.py (standard library only)
pkgs+=(python3-numpy python3-pytest python3-pip)  # the Python package's tests (python/tests, ctest python.pytest)
missing=()
# Optional, for fuzzing (scripts/fuzz.sh, docs/fuzzing.md): clang and its
# libFuzzer/sanitizer runtimes. Installed when the package sources have them;
# without them everything else builds and scripts/test.sh skips the fuzz step.
optional=(clang libclang-rt-14-dev)
for p in "${pkgs[@]}" "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The Python side (python/, docs/python.md) for the python3 on PATH: numpy and
# pytest (the ctest python.pytest), scikit-build-core (pip install ./python).
# torch only with TIMITSEG_TORCH=1: PyPI's Linux wheel pulls the CUDA wheels,
# 5.7 GB installed and 2 min 24 s here (2026-11-26), so by default the torch
# tests skip, saying so, and the numpy tests cover the C API.
python_packages() {
  local want=(numpy pytest scikit_build_core) need=()
  for m in "${want[@]}"; do python3 -c "import $m" 2>/dev/null || need+=("${m//_/-}"); done
  if [ "${TIMITSEG_TORCH:-0}" = 1 ] && ! python3 -c "import torch" 2>/dev/null; then need+=(torch); fi
  [ ${#need[@]} -eq 0 ] && { echo "setup: python packages present (numpy pytest scikit-build-core)"; return 0; }
  echo "setup: pip install ${need[*]}"
  python3 -m pip install --quiet "${need[@]}" 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages "${need[@]}"
}
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present (${pkgs[*]} ${optional[*]})"
  python_packages
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
# Another apt-get or dpkg (unattended-upgrades, a second setup) holds the dpkg
# lock: wait for it up to 10 minutes instead of failing at once, and if it is
# still held, say so (not "installing without the optional packages").
lock_wait=(-o "DPkg::Lock::Timeout=${TIMITSEG_APT_LOCK_TIMEOUT:-600}")
log=$(mktemp)
trap 'rm -f "$log"' EXIT
lock_held() { grep -qE 'Could not get lock|Unable to acquire the dpkg frontend lock|Unable to lock directory' "$log"; }
lock_error() {
  echo "setup: the dpkg lock is still held after ${TIMITSEG_APT_LOCK_TIMEOUT:-600} s by another package manager ($(grep -m1 -oE 'held by process [0-9]+( \([^)]*\))?' "$log" || echo 'apt-get, dpkg or unattended-upgrades')): let it finish, then run scripts/setup.sh again" >&2
  exit 100
}
apt_get() {  # apt-get with the lock wait; its stderr is printed and kept in $log
  local rc=0
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${lock_wait[@]}" "$@" 2>"$log" || rc=$?
  cat "$log" >&2
  return $rc
}
apt_get update -qq || { lock_held && lock_error; exit 1; }
if ! apt_get install -y -qq --no-install-recommends "${missing[@]}"; then
  lock_held && lock_error
  # Retry without the optional packages: they must never block the build.
  required=()
  for p in "${missing[@]}"; do [[ " ${optional[*]} " == *" $p "* ]] || required+=("$p"); done
  echo "setup: installing without the optional fuzzing packages (${optional[*]})" >&2
  if [ ${#required[@]} -gt 0 ] && ! apt_get install -y -qq --no-install-recommends "${required[@]}"; then
    lock_held && lock_error
    exit 100
  fi
fi
python_packages
