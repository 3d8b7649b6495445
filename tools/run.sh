#!/usr/bin/env bash
# Builds gemtb and runs its main job. Until the cluster simulator lands, the main job is the oracle
# demo (`gemtb demo`); extra arguments go to it. Safe to re-run: setup and configure are idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target gemtb -j "$(nproc)"
exec build/bin/gemtb demo "$@"
