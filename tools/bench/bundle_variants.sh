#!/usr/bin/env bash
# Packs the variants that tools/bench/prebuild_variant.sh built (.deb/variants/NAME.bin.tar.xz) into one
# .deb/variants/prebuilt.bundle.tar.xz, a folder NAME a variant, which tools/bench/train_gpu_ab.sh
# unpacks as it does the separate packages. The variants' binaries share most of their bytes; one xz
# stream whose dictionary spans a file, with the same file of every variant side by side, keeps one
# copy of what they share: three variants (gemtb and four test binaries each) took 12.9 MB against
# 35 MB as separate packages, so about ten fit the 64 MiB a device call carries instead of four. A
# bundle already there is unpacked and packed again with the new variants (a package replaces a
# bundled variant of its name); the packages are removed; NAME.flags and NAME.base stay as they are.
# About 30 s of one core a variant.
#
# usage: tools/bench/bundle_variants.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
shopt -s nullglob
bundle=.deb/variants/prebuilt.bundle.tar.xz
packages=(.deb/variants/*.bin.tar.xz)
if [ ${#packages[@]} -eq 0 ]; then
  echo "bundle_variants: no .deb/variants/*.bin.tar.xz to bundle" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -f "$bundle" ] && tar -xJf "$bundle" -C "$work"
for f in "${packages[@]}"; do
  v=$(basename "$f" .bin.tar.xz)
  rm -rf "${work:?}/$v" && mkdir "$work/$v" && tar -xJf "$f" -C "$work/$v"
done
# Every file path of any variant, then that file of each variant in turn.
(
  cd "$work"
  find . -mindepth 2 -type f -printf '%P\n' | cut -d/ -f2- | sort -u | while IFS= read -r path; do
    for v in */; do
      [ -f "$v$path" ] && printf '%s\n' "$v$path"
    done
  done
) >"$work.list"
tar --no-recursion -C "$work" -cf - -T "$work.list" | xz -T1 -9e --lzma2=preset=9e,dict=128MiB >"$bundle.tmp"
rm -f "$work.list"
mv "$bundle.tmp" "$bundle"
rm -f "${packages[@]}"
echo "bundle_variants: $bundle ($(du -h "$bundle" | cut -f1)):" \
  "$(find "$work" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort | tr '\n' ' ')"
