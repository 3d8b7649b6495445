#!/usr/bin/env bash
# Builds everything (CUDA code too when nvcc is present) and runs the whole CPU test suite. GPU
# tests report as skipped on a machine without a GPU. Extra arguments go to ctest (e.g. -L numerics).
set -euo pipefail
cd "$(dirname "$0")/.."
stage() { printf '\n== %s  [%s]\n' "$1" "$(date -u +%H:%M:%S)"; }
t0=$SECONDS
stage "setup"
bash tools/setup.sh
stage "configure"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
stage "build"
cmake --build build -j "$(nproc)"
stage "test"
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
stage "done in $((SECONDS - t0)) s"
