#!/usr/bin/env bash
# Builds one commit on this machine for tools/bench/train_gpu_ab.sh, which then runs it on the lent GPU
# without building it there (a device build of one tree takes 90-125 s of the session's device time,
# three in parallel about 400 s). The package is an installed tree in .deb/variants/NAME.bin.tar.xz:
# bin/gemtb and the named test binaries (stripped), and share/gemtb with the data gemtb reads
# (model/configs, sim/scenarios, sim/calibration, sim/network/default_cluster.json), where bin/gemtb
# finds it (model/description/data_dir.h). About 11.5 MB a variant with xz -9e (gemtb and three test
# binaries), so four fit the 64 MiB a call carries beside .deb's packages and the 14 MB working tree;
# tools/bench/bundle_variants.sh packs several into one bundle of about a third of their bytes.
#
# usage: tools/bench/prebuild_variant.sh NAME REV [TEST_TARGET...]
#   e.g. tools/bench/prebuild_variant.sh a_base HEAD~1 && tools/bench/prebuild_variant.sh b_head HEAD
# The builds use this machine's compiler and the CUDA toolkit in /usr/local/cuda, which must be the
# device's release (the device's libraries are loaded at run time): give every variant of one A/B the
# same origin (all prebuilt, or all built on the device), so that a timing difference is the change's.
# The tree and its build stay in ${TMPDIR:-/tmp}/gemtb-prebuild-NAME (the build is reused next time).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 2 ]; then
  echo "usage: $0 NAME REV [TEST_TARGET...]" >&2
  exit 2
fi
name=$1 rev=$2
shift 2
repo=$PWD
root=${TMPDIR:-/tmp}/gemtb-prebuild-$name  # the tree, with its build in build/ as tools/test.sh lays it out
stage=$root-stage
commit=$(git rev-parse --verify "$rev^{commit}")
fresh=$root-tree
rm -rf "$stage" "$fresh"
mkdir -p "$root" "$fresh" "$stage/bin" .deb/variants
# The new tree's files stamped now (tar -m), except those whose bytes the previous tree had, which keep
# its times: the reused build then rebuilds exactly what changed. (git archive's own stamps are the
# commit's time, older than the objects of a build made since, so a changed file would not rebuild.)
git archive "$commit" | tar -x -m -C "$fresh"
(cd "$fresh" && find . -type f) | while IFS= read -r f; do
  if cmp -s "$fresh/$f" "$root/$f"; then touch -r "$root/$f" "$fresh/$f"; fi
done
find "$root" -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf {} +
(cd "$fresh" && find . -mindepth 1 -maxdepth 1 -exec mv {} "$root/" \;)
rmdir "$fresh"
(
  cd "$root"
  # The same configuration as tools/test.sh in the same layout, so ccache (paths relative to the
  # tree) serves what this machine's own builds compiled.
  source tools/ccache_env.sh
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >build.configure.log
  cmake --build build --target gemtb "$@"
)
build=$root/build src=$root
for t in gemtb "$@"; do
  strip -o "$stage/bin/$t" "$build/bin/$t"
done
data=$stage/share/gemtb
mkdir -p "$data/model" "$data/sim/network"
cp -r "$src/model/configs" "$data/model/"
cp -r "$src/sim/scenarios" "$src/sim/calibration" "$data/sim/"
cp "$src/sim/network/default_cluster.json" "$data/sim/network/"
echo "$commit" >"$stage/COMMIT"
tar -C "$stage" -cf - . | xz -T0 -9e >"$repo/.deb/variants/$name.bin.tar.xz"
echo "prebuild_variant: .deb/variants/$name.bin.tar.xz ($(du -h "$repo/.deb/variants/$name.bin.tar.xz" | cut -f1)) of ${commit:0:12}"
