# Sourced by the scripts that build gemtb on the lent GPU machine (tools/gpu_check.sh,
# tools/embed_gpu_check.sh, tools/bench_gpu.sh, tools/bench_comm.sh): the steps they share. Each
# caller has set $out; messages go to stdout and $out/summary.txt.

# The device machine's temporary folder ($TMPDIR, else the system's), where the scripts keep the
# unpacked packages, sources, builds and logs between the calls of one warm machine.
export scratch=$(dirname "$(mktemp -u)")  # exported: functions run by xargs read it

# unpack_device_deps NAME [require-src]: unpacks the Debian packages in .deb/ into
# prefix=$scratch/gemtb-deps (the device has CUDA, CMake and ninja but none of our packages and no
# registry) and, where .deb/src.tgz exists (a `git archive` of the commit in .deb/SOURCE: the working
# tree that travels may hold uncommitted work), the sources into srcdir=$scratch/gemtb-src; without it
# srcdir=. (the working tree), or, with require-src, exit 2. Puts the packages' libraries on
# LD_LIBRARY_PATH. Without packages: exit 2, the message naming NAME.
unpack_device_deps() {
  local name=$1 require_src=${2:-} f
  prefix=$scratch/gemtb-deps
  mkdir -p "$prefix"
  shopt -s nullglob
  local debs=(.deb/*.deb)
  if [ ${#debs[@]} -eq 0 ]; then
    echo "$name: .deb/ holds no packages; see gpu/README.md" | tee -a "$out/summary.txt"
    exit 2
  fi
  if [ -n "$require_src" ] && [ ! -f .deb/src.tgz ]; then
    echo "$name: .deb/src.tgz missing; see gpu/README.md" | tee -a "$out/summary.txt"
    exit 2
  fi
  for f in "${debs[@]}"; do dpkg -x "$f" "$prefix"; done
  srcdir=.
  if [ -f .deb/src.tgz ]; then
    srcdir=$scratch/gemtb-src
    mkdir -p "$srcdir" && tar -xzf .deb/src.tgz -C "$srcdir"
  fi
  export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# configure_device_build SRC BUILD [cmake arguments...]: configures a Release build of SRC in BUILD
# against $prefix, CUDA on where nvcc is, without the benchmarks. The machine's compiler may be
# newer than CI's and warn where CI does not; CI enforces -Werror, here tools/no_werror.sh drops it
# so that a new warning cannot stop the run (warnings still print).
configure_device_build() {
  local src=$1 build=$2
  shift 2
  local launcher="$PWD/tools/no_werror.sh"
  chmod +x "$launcher"  # modes may not survive the copy to the device
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix/usr" \
    -DGEMTB_BUILD_BENCHMARKS=OFF -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" \
    -DCMAKE_CUDA_COMPILER_LAUNCHER="$launcher" "$@"
}

# build_device_targets NAME BUILD CHECK TARGET...: configures $srcdir into BUILD and builds the
# TARGETs (log: $out/build.log). $out/summary.txt starts with NAME, the commit and the GPU; without
# BUILD/bin/CHECK afterwards the build failed: the log's tail, then exit 2. Ends with the build's time.
build_device_targets() {
  local name=$1 build=$2 check=$3
  shift 3
  local t0=$SECONDS
  {
    echo "$name: $(cat .deb/SOURCE 2>/dev/null) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
    configure_device_build "$srcdir" "$build" >"$out/build.log" 2>&1 &&
      cmake --build "$build" --target "$@" >>"$out/build.log" 2>&1
  } | tee "$out/summary.txt"
  if [ "${PIPESTATUS[0]}" -ne 0 ] || [ ! -x "$build/bin/$check" ]; then
    echo "build failed; see build.log" | tee -a "$out/summary.txt"
    tail -30 "$out/build.log"
    exit 2
  fi
  echo "build: $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
}
