#!/usr/bin/env bash
# Installs the build into a temporary prefix, moves the installed tree, and checks that
#  - bin/gemtb finds its data as ../share/gemtb from any working directory (--version says where),
#    runs `model`, `whatif` and `golden verify` from there, and never reads the source tree it was
#    built from (with share/gemtb removed it fails naming the installed path);
#  - GEMTB_DATA_DIR points it at another data folder;
#  - a separate project builds against find_package(gemtb) and calls the oracle.
set -euo pipefail
build_dir=$1
src_dir=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }

cmake --install "$build_dir" --prefix "$tmp/prefix" >/dev/null
mv "$tmp/prefix" "$tmp/moved"
gemtb=$tmp/moved/bin/gemtb
mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"

version=$("$gemtb" --version)
echo "$version"
grep -q "^gemtb [0-9]" <<<"$version" || fail "--version has no version line"
grep -q "^commit " <<<"$version" || fail "--version has no commit line"
grep -q "^build .*, CUDA o" <<<"$version" || fail "--version has no build options"
grep -qx "data $tmp/moved/share/gemtb (installed)" <<<"$version" || fail "--version: data is not the installed folder"

"$gemtb" model --config tiny | head -1 | grep -q "^model tiny:" || fail "model --config tiny"
"$gemtb" whatif --gpus 8 --no-sensitivity --no-checks --quiet --out-dir "$tmp/whatif" >/dev/null
[ -s "$tmp/whatif/summary.json" ] || fail "whatif wrote no summary.json"
"$gemtb" golden verify | grep -q "in $tmp/moved/share/gemtb/golden match bit for bit" || fail "golden verify"

# Another data folder through the environment: a copy works, an empty folder is named in the error.
cp -r "$tmp/moved/share/gemtb" "$tmp/data-copy"
GEMTB_DATA_DIR=$tmp/data-copy "$gemtb" --version | grep -qx "data $tmp/data-copy (GEMTB_DATA_DIR)" ||
  fail "GEMTB_DATA_DIR not reported"
GEMTB_DATA_DIR=$tmp/data-copy "$gemtb" model --config tiny >/dev/null || fail "model with GEMTB_DATA_DIR"

# Without its share/gemtb the installed binary does not fall back to the source tree.
rm -rf "$tmp/moved/share/gemtb"
if err=$("$gemtb" model --config tiny 2>&1); then fail "model ran without its data: $err"; fi
grep -q "cannot be read at $tmp/moved/share/gemtb/model/configs/tiny.json" <<<"$err" || fail "unexpected error: $err"
if "$gemtb" whatif --gpus 8 --quiet --out-dir "$tmp/whatif2" 2>"$tmp/err"; then fail "whatif ran without its data"; fi
grep -q "$tmp/moved/share/gemtb/sim/scenarios/gem-default.json" "$tmp/err" || fail "whatif error: $(cat "$tmp/err")"

cmake -S "$src_dir/consumer" -B "$tmp/build" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/moved" >/dev/null
cmake --build "$tmp/build" >/dev/null
"$tmp/build/consumer"
echo "install_test: OK"
