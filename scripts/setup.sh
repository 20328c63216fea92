#!/usr/bin/env bash
# Installs the Debian packages timitseg builds against (run as root, or with sudo
# available). The CUDA toolkit is optional: without it the CPU parts build.
set -euo pipefail
pkgs=(cmake g++ make pkg-config libsndfile1-dev libsoxr-dev libeigen3-dev libcli11-dev libyaml-cpp-dev
      nlohmann-json3-dev libspdlog-dev libgtest-dev libbenchmark-dev libssl-dev zlib1g-dev
      chromium)  # chromium: the headless-browser test of the HTML report (tests/app)
pkgs+=(python3)  # tests/docs/run_doc_blocks.py (standard library only)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present (${pkgs[*]})"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
