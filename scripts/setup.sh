#!/usr/bin/env bash
# Installs the Debian packages timitseg builds against (run as root, or with sudo
# available). The CUDA toolkit is optional: without it the CPU parts build.
set -euo pipefail
pkgs=(cmake g++ make pkg-config libsndfile1-dev libsoxr-dev libeigen3-dev libcli11-dev libyaml-cpp-dev
      nlohmann-json3-dev libspdlog-dev libgtest-dev libbenchmark-dev libssl-dev zlib1g-dev
      flite1-dev
      libopenmpi-dev openmpi-bin  # training on several processes (mpirun; docs/multigpu.md) and its CI tests
      libboost-math-dev  # header-only Boost.Math: compare's t-test and sign test
      chromium)  # chromium: the headless-browser test of the HTML report (tests/app)
pkgs+=(python3)  # tests/docs/run_doc_blocks.py (standard library only)
missing=()
# Optional, for fuzzing (scripts/fuzz.sh, docs/fuzzing.md): clang and its
# libFuzzer/sanitizer runtimes. Installed when the package sources have them;
# without them everything else builds and scripts/test.sh skips the fuzz step.
optional=(clang libclang-rt-14-dev)
for p in "${pkgs[@]}" "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present (${pkgs[*]} ${optional[*]})"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
  # Retry without the optional packages: they must never block the build.
  required=()
  for p in "${missing[@]}"; do [[ " ${optional[*]} " == *" $p "* ]] || required+=("$p"); done
  echo "setup: installing without the optional fuzzing packages (${optional[*]})" >&2
  [ ${#required[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${required[@]}"
fi
