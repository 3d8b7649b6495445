#!/usr/bin/env bash
# Installs every Debian package gemtb builds, tests or benchmarks with. Idempotent: packages already
# present are left alone, so a second run does nothing. Needs root on Debian 12; the CUDA 13 toolkit
# (nvcc, NCCL) is expected in /usr/local/cuda and is optional: without it gpu/ is not built.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libabsl-dev libtbb-dev libeigen3-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev librapidcheck-dev libbenchmark-dev
  python3 python3-numpy python3-venv python3-dev
  clang libclang-rt-dev
  ccache
  openmpi-bin   # mpirun, to test `gemtb ref train` across processes as Open MPI launches it (no MPI library is linked)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
