#!/usr/bin/env bash
# Builds the gemtb Python package with CUDA on the lent H200 and runs gemtb.gpu's tests there, in one
# device call (the same dependency carrying as tools/gpu_check.sh; gpu/README.md has the steps):
#   1. unpacks the Debian packages in .deb/ into a private prefix; builds from .deb/src.tgz (a
#      `git archive` of the commit in .deb/SOURCE) where it exists, else from the working tree;
#   2. a venv that sees the machine's python3 packages (its PyTorch, NumPy, ml_dtypes, nanobind,
#      scikit-build-core and pytest), topped up from the wheels in .whl/ (no index: the machine
#      reaches none) where the image lacks one;
#   3. `pip install <src> -C cmake.define.GEMTB_WITH_CUDA=ON` against the unpacked prefix;
#   4. pytest tests/python/test_gpu_attention.py: GEMTB_GPU_CASES (--cases, default 100) random
#      cases per family (act x mask) forward and backward through the custom op gemtb::attention,
#      judged by `gemtb check attention`'s criteria; torch.compile(fullgraph=True) of a small model
#      around the op; the argument errors;
# everything inside --budget seconds (default 570). Writes under $OUT: summary.txt, build.log,
# smoke.log, pytest.log, junit.xml, results.json.
# Usage: bash tools/python_gpu_check.sh [--cases N] [--seed S] [--budget S]
# Exit status: 0 everything ran and passed, 1 a test failed or was skipped, 2 the build failed.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/lib/device_build.sh

cases=100
seed=1
budget=570
while [ $# -gt 0 ]; do
  case "$1" in
    --cases) cases=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    *) echo "python_gpu_check: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=${OUT:-$scratch/gemtb-python-gpu-check}
mkdir -p "$out"
: > "$out/summary.txt"
stage() { printf '== %-50s [%4d s]\n' "$1" "$SECONDS" | tee -a "$out/summary.txt"; }

# --- 1. dependencies and sources ------------------------------------------------------------------
stage "unpack .deb/ (and .deb/src.tgz) into the temporary folder"
unpack_device_deps python_gpu_check
commit=$(cat .deb/SOURCE 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
{
  echo "commit: $commit (source: $([ "$srcdir" = . ] && echo "the working tree" || echo ".deb/src.tgz"))"
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -1
  python3 --version
} 2>&1 | sed 's/^/   /' | tee -a "$out/summary.txt"

# --- 2. the Python environment --------------------------------------------------------------------
stage "venv over python3, topped up from .whl/"
venv=$scratch/gemtb-python-venv
[ -x "$venv/bin/python" ] || python3 -m venv --system-site-packages "$venv"
py=$venv/bin/python
# python3 there is itself a venv (/opt/torch/.venv), whose packages --system-site-packages does not
# reach: a .pth file puts its site-packages after ours.
python3 -c "import site; print('\n'.join(site.getsitepackages()))" \
  > "$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gemtb-host-python.pth"
# Installed ones satisfy these; .whl/ supplies what the image lacks (gpu/README.md: how to fill it).
if ! "$py" -m pip install -q --disable-pip-version-check --no-index --find-links .whl \
     "scikit-build-core>=0.10" "nanobind>=2.0" numpy ml_dtypes pytest > "$out/build.log" 2>&1; then
  tail -5 "$out/build.log" | tee -a "$out/summary.txt"
  stage "Python build dependencies missing: fill .whl/ (gpu/README.md)"
  exit 2
fi
"$py" -c "import torch, numpy, ml_dtypes, nanobind; print('   torch', torch.__version__, '| cuda', torch.version.cuda, \
'| numpy', numpy.__version__, '| nanobind', nanobind.__version__, '| GPUs', torch.cuda.device_count())" \
  2>&1 | tee -a "$out/summary.txt"

# --- 3. the package, with CUDA --------------------------------------------------------------------
stage "pip install the package with GEMTB_WITH_CUDA=ON"
launcher="$PWD/tools/no_werror.sh"
chmod +x "$launcher"
# --config-settings, not -C: older pips know only the long form. The build folder stays in the
# temporary folder, so a second call on a warm machine rebuilds only what changed.
if ! CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$py" -m pip install -v --disable-pip-version-check --no-index \
     --find-links .whl --no-build-isolation --no-deps "$srcdir" \
     --config-settings=cmake.define.GEMTB_WITH_CUDA=ON \
     --config-settings=cmake.define.CMAKE_PREFIX_PATH="$prefix/usr" \
     --config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER="$launcher" \
     --config-settings=cmake.define.CMAKE_CUDA_COMPILER_LAUNCHER="$launcher" \
     --config-settings=build-dir="$scratch/gemtb-python-build" >> "$out/build.log" 2>&1; then
  grep -E "error|FAILED" "$out/build.log" | head -30 | tee -a "$out/summary.txt"
  stage "build FAILED (build.log)"
  exit 2
fi
# A smoke test before pytest: the driver probe and one drawn case, without PyTorch, with PyTorch
# imported first, and with PyTorch's CUDA context made first; a crash leaves the libraries the
# module resolved and, where gdb is installed, the native backtrace in smoke.log.
stage "smoke: probe and one case, with and without PyTorch (smoke.log)"
core=$(cd / && "$py" -c "import importlib.util as u; print(u.find_spec('gemtb._core').origin)" 2>/dev/null)
smoke_ok=1
probe="from gemtb import _core; print('   probe:', _core.gpu_attention_available()); \
import gemtb.testing as t; print('   case:', t.attention_case(t.attention_families()[0], 0)['description'][:40])"
for first in "" "import torch; " "import torch; torch.zeros(1, device='cuda'); "; do
  code="$first$probe"
  echo "--- $code" >> "$out/smoke.log"
  if ! (cd / && "$py" -X faulthandler -c "$code") >> "$out/smoke.log" 2>&1; then
    smoke_ok=0
    echo "   crashed: ${first:-without PyTorch}" | tee -a "$out/summary.txt"
    if command -v gdb > /dev/null; then
      (cd / && gdb -q -batch -ex run -ex bt --args "$py" -c "$code") >> "$out/smoke.log" 2>&1
    fi
    # Which libraries the module and its own dependencies bound symbols to, besides themselves and
    # the system's: a library loaded earlier into the global scope that interposes is named here.
    rm -rf "$scratch/ld-bindings" && mkdir -p "$scratch/ld-bindings"
    (cd / && LD_DEBUG=bindings LD_DEBUG_OUTPUT="$scratch/ld-bindings/b" "$py" -c "$code") > /dev/null 2>&1
    echo "--- foreign bindings (count, from -> to symbol)" >> "$out/smoke.log"
    cat "$scratch"/ld-bindings/b.* 2>/dev/null \
      | grep -E "binding file [^ ]*(gemtb/_core\\.|/libabsl_|/libtbb)[^ ]* " \
      | sed -E 's/.*binding file ([^ ]*) \[0\] to ([^ ]*) \[0\]: normal symbol `([^'"'"']*).*/\1 -> \2 \3/' \
      | sed -E 's#[^ ]*/##; s# [^ ]*/# #' \
      | grep -vE -- "-> (_core|libabsl|libtbb|libc\.|libm\.|libstdc|libgcc|libpython|libcudart|ld-linux|python)" \
      | sort | uniq -c | sort -rn | head -60 >> "$out/smoke.log"
  fi
done
grep "^   " "$out/smoke.log" | tee -a "$out/summary.txt"
(cd / && "$py" -c "import gemtb.gpu as g; print('   gemtb.gpu.available():', g.available(), g.unavailable_reason())") \
  2>&1 | tee -a "$out/summary.txt"
if [ $smoke_ok = 0 ]; then
  { echo "--- ldd $core"; ldd "$core"; echo "--- LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "--- system abseil/TBB"; ldconfig -p | grep -E "absl|tbb" | head -20; ls -d /usr/include/absl /usr/include/tbb 2>&1
  } >> "$out/smoke.log" 2>&1
fi

# --- 4. the tests ---------------------------------------------------------------------------------
stage "pytest tests/python/test_gpu_attention.py ($cases cases per family, seed $seed)"
left=$((budget - SECONDS - 10))
[ $left -gt 30 ] || left=30
# The package lives in python/gemtb, not at the root: `import gemtb` is the installed one.
GEMTB_GPU_CASES=$cases GEMTB_GPU_SEED=$seed timeout "$left" "$py" -m pytest -v -rs -p no:cacheprovider \
  --junitxml="$out/junit.xml" tests/python/test_gpu_attention.py > "$out/pytest.log" 2>&1
test_rc=$?
grep -E "PASSED|FAILED|SKIPPED|ERROR" "$out/pytest.log" | sed 's/^/   /' | tail -60 >> "$out/summary.txt"
grep -E "excused|^(FAILED|ERROR) |^=+ .*(passed|failed|error)" "$out/pytest.log" | sed 's/^/   /' | tee -a "$out/summary.txt"
[ $test_rc -eq 124 ] && echo "   pytest killed at its time limit ($left s)" | tee -a "$out/summary.txt"
# A skipped GPU test means the kernels did not run here: that is a failure of this check (the one
# test that skips where the kernels are available does not count).
skipped=$(grep " SKIPPED" "$out/pytest.log" | grep -vc test_without_the_kernels_use_says_why)
status=0
[ $test_rc -eq 0 ] || status=1
[ "$skipped" -eq 0 ] || status=1

# --- 5. results -----------------------------------------------------------------------------------
"$py" - "$out" "$commit" "$cases" "$seed" "$test_rc" "$skipped" <<'PY'
import json, os, sys
import xml.etree.ElementTree as ET
out, commit, cases, seed, test_rc, skipped = sys.argv[1:]
tests = []
try:
    for case in ET.parse(os.path.join(out, "junit.xml")).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = child.tag
        tests.append({"name": case.get("name"), "outcome": outcome, "seconds": float(case.get("time", 0))})
except (OSError, ET.ParseError):
    pass
result = {"what": "gemtb.gpu: the custom op gemtb::attention against the oracle, torch.compile, argument errors",
          "commit": commit, "command": f"GEMTB_GPU_CASES={cases} GEMTB_GPU_SEED={seed} pytest tests/python/test_gpu_attention.py",
          "pytest_exit": int(test_rc), "skipped": int(skipped), "tests": tests}
json.dump(result, open(os.path.join(out, "results.json"), "w"), indent=2)
PY
stage "done: status $status"
exit $status
