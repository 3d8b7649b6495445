#!/usr/bin/env bash
# Builds the whole CPU test suite with AddressSanitizer + UndefinedBehaviorSanitizer in build-asan/
# and runs it. Any report fails the test that triggered it (-fno-sanitize-recover, halt_on_error).
# Excluded: label `slow` (the exhaustive 2^32 loops take hours under ASan; the plain build runs
# them) and label `gpu`. CUDA is off: nvcc code is not instrumented.
#
#   bash tools/sanitize.sh [extra ctest arguments, e.g. -L embedding]
# CXX=clang++ selects clang (default: the system compiler, GCC, as the main build).
# -O1, not the main build's -O3: the level the sanitizers' own docs suggest; the plain build still runs
# every test at -O3. On a 2-core machine like CI's (2026-12-01) -O1 built in 753-888 s and ran the
# suite in ~300 s (the stage: 1,055-1,185 s), against ~1,480 s and 190-217 s at -O3 (the stage:
# 1,699 s); the compile CPU time of the same objects: 1,521 s against 2,974 s.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/ccache_env.sh
stage() { printf '\n== sanitize: %s  [%s]\n' "$1" "$(date -u +%H:%M:%S)"; }
t0=$SECONDS
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
build=build-asan

stage "configure"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DGEMTB_WITH_CUDA=OFF -DGEMTB_BUILD_BENCHMARKS=OFF \
  -DCMAKE_CXX_FLAGS="$san -fno-omit-frame-pointer -g1" \
  -DCMAKE_EXE_LINKER_FLAGS="$san" -DCMAKE_SHARED_LINKER_FLAGS="$san" >/dev/null
stage "build"
cmake --build "$build" -j "$(nproc)"
stage "test"
# detect_leaks: leaks fail too. LDFLAGS reaches the install test's consumer project, which links
# the instrumented static libraries and so needs the sanitizer runtimes.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LDFLAGS="$san"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -LE 'slow|gpu' "$@"
stage "done in $((SECONDS - t0)) s"
