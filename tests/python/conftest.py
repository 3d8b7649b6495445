"""Fixtures of the Python suite: the gemtb command line (to compare bytes with) and .npy helpers."""

import os
import pathlib
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def pytest_addoption(parser):
    parser.addoption("--gemtb-cli", default=str(ROOT / "build" / "bin" / "gemtb"),
                     help="the gemtb binary the byte-identity tests run (default: build/bin/gemtb)")


@pytest.fixture(scope="session")
def cli(request):
    """run(args, out_dir) -> {file name without .npy: raw bytes of the .npy data} for `gemtb ARGS`."""
    binary = request.config.getoption("--gemtb-cli")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary}: no gemtb binary; build it (tools/test.sh does) or pass --gemtb-cli")

    def run(args, out_dir):
        r = subprocess.run([binary, *map(str, args), "--out-dir", str(out_dir)], capture_output=True, text=True)
        assert r.returncode == 0, f"gemtb {' '.join(map(str, args))}: exit {r.returncode}: {r.stderr}"
        return {p.stem: np.load(p) for p in sorted(pathlib.Path(out_dir).glob("*.npy"))}

    return run


@pytest.fixture
def save(tmp_path):
    """save(name, array) -> the path of name.npy under tmp_path (bfloat16 as its <u2 bits, as gemtb reads it)."""
    def write(name, a):
        path = tmp_path / f"{name}.npy"
        if a.dtype.name == "bfloat16":
            a = a.view(np.uint16)
        np.save(path, a)
        return path
    return write


def same_bytes(cli_array, py_array):
    """The CLI's .npy array and the binding's: the same dtype (bfloat16 as <u2 bits), shape and bytes."""
    if py_array.dtype.name == "bfloat16":
        py_array = py_array.view(np.uint16)
    return (cli_array.dtype == py_array.dtype and cli_array.shape == py_array.shape
            and cli_array.tobytes() == py_array.tobytes())
