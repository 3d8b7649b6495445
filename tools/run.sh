#!/usr/bin/env bash
# Builds gemtb and runs its main job: `gemtb whatif`, the cluster simulator on the default GEM-scale
# scenario over 64..16,384 GPUs (extra arguments go to it, e.g. a scenario file or --gpus 1024,4096).
# Safe to re-run: setup and configure are idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target gemtb -j "$(nproc)"
exec build/bin/gemtb whatif "$@"
