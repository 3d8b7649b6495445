#!/usr/bin/env bash
# The Python suite: `pip install .` (the gemtb package, python/) into a venv in build/venv (git-ignored;
# kept between runs of one clone), with pytest, hypothesis (the binding's property tests), pandas
# (whatif's DataFrames) and the conformance peers (NumPy, ml_dtypes, PyTorch) from PyPI, records their
# versions in build/python-versions.txt, then runs `pytest tests/python tests/conformance` against the
# build's gemtb binary. Called by tools/test.sh after the CMake build (the byte-identity tests run
# build/bin/gemtb). The package's libraries compile through ccache with the same flags as the CMake
# build's, so they are cache hits after it.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/ccache_env.sh
t0=$SECONDS
venv=build/venv
python=/usr/bin/python3
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
# Build tools and test peers; pip's cache keeps the downloads for the next run on this machine.
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
  "scikit-build-core>=0.10" "nanobind>=2.0" pytest numpy ml_dtypes pandas
# hypothesis drives tests/python/test_binding_properties.py only; without it they skip by name.
if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check hypothesis; then
  echo "python: hypothesis could not be installed; the binding's property tests skip"
fi
# PyTorch is a peer of the conformance suite only (several GB from PyPI, with its CUDA libraries);
# where it cannot be installed, its tests skip by name and this line says why.
if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check torch; then
  echo "python: PyTorch could not be installed; the conformance tests that compare with it skip"
fi
t_peers=$SECONDS
# No build isolation: the build tools above are reused, nothing is downloaded again per install.
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation .
t_install=$SECONDS
"$venv/bin/python" -m pip list --format=freeze 2>/dev/null \
  | grep -iE '^(gemtb|numpy|ml[-_]dtypes|pandas|torch|pytest|hypothesis|nanobind|scikit[-_]build[-_]core)==' | tee build/python-versions.txt
printf 'python: venv and peers %d s, pip install . %d s\n' $((t_peers - t0)) $((t_install - t_peers))
# The package lives in python/gemtb, not at the root: `import gemtb` is the installed one.
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/python tests/conformance
printf 'python: done in %d s\n' $((SECONDS - t0))
