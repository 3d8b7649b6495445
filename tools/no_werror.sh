#!/usr/bin/env bash
# Compiler launcher for builds on the lent GPU machines (tools/gpu_check.sh, bench_gpu.sh,
# bench_comm.sh): their compilers may be newer than CI's and warn where CI does not. CI keeps
# -Werror; there this drops it so that a new warning cannot stop a device call (warnings still print).
args=()
for a in "$@"; do
  case "$a" in
    -Werror|--Werror=all-warnings) ;;
    -Xcompiler=*) args+=("${a//,-Werror/}") ;;
    *) args+=("$a") ;;
  esac
done
exec "${args[@]}"
