#!/usr/bin/env bash
# Builds everything (CUDA code too when nvcc is present) and runs the whole CPU test suite. GPU
# tests report as skipped on a machine without a GPU. Extra arguments go to ctest (e.g. -L numerics).
# Then the Python package and its suites (tools/python_test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/ccache_env.sh
stage() { printf '\n== %s  [%s]\n' "$1" "$(date -u +%H:%M:%S)"; }
t0=$SECONDS
stage "setup"
bash tools/setup.sh
stage "configure"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
# The fuzz stage of .ci/run builds sim/ and model/ with clang 14, which rejects code GCC accepts (a
# lambda capturing a structured binding, before clang 16): a syntax-only pass with the build's
# include paths and defines shows such an error here, before the long GCC build. Errors only: GCC's
# warning set is what -Werror enforces.
stage "clang syntax check (sim/, model/)"
if command -v clang++-14 >/dev/null 2>&1; then
  /usr/bin/python3 - build/compile_commands.json "$(nproc)" <<'PY'
import concurrent.futures, json, os, shlex, subprocess, sys
entries = json.load(open(sys.argv[1]))
root = os.getcwd()
jobs = {}  # one check per file, whatever targets compile it
for e in entries:
    path = os.path.relpath(e["file"], root)
    if not (path.startswith(("sim/", "model/")) and path.endswith(".cc")):
        continue
    args = shlex.split(e["command"]) if "command" in e else e["arguments"]
    keep, i = [], 1
    while i < len(args):
        a = args[i]
        if a in ("-isystem", "-I", "-D", "-include") and i + 1 < len(args):
            keep += [a, args[i + 1]]
            i += 2
            continue
        if a.startswith(("-I", "-D", "-std=", "-march=", "-isystem")):
            keep.append(a)
        i += 1
    jobs[path] = (path, ["clang++-14", "-fsyntax-only", *keep, e["file"]])
def run(job):
    r = subprocess.run(job[1], cwd=root, capture_output=True, text=True)
    return job[0], r.returncode, r.stderr
failed = 0
with concurrent.futures.ThreadPoolExecutor(int(sys.argv[2])) as pool:
    for path, rc, err in pool.map(run, [jobs[p] for p in sorted(jobs)]):
        if rc != 0:
            failed += 1
            sys.stderr.write(f"clang++-14 rejects {path}:\n{err}")
print(f"clang++-14 -fsyntax-only: {len(jobs)} files of sim/ and model/, {failed} rejected")
sys.exit(1 if failed else 0)
PY
else
  echo "clang++-14 not found: clang syntax check skipped (the fuzz stage of .ci/run needs it)"
fi
stage "build"
cmake --build build -j "$(nproc)"
stage "test"
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
stage "python (pip install ., pytest tests/python tests/conformance)"
t_py=$SECONDS
bash tools/python_test.sh
echo "python stage: $((SECONDS - t_py)) s"
stage "done in $((SECONDS - t0)) s"
