"""`gemtb --version` prints the version, commit, build options and data folder; a command group
(`gemtb ref`, `gemtb gpu`, ...) given alone lists its subcommands with one line each, with --help
exits 0, and with an unknown subcommand exits 2 naming it.

The build-time script that writes the version header says "unknown" for a tree without git and
rewrites the header only when its text changes.

usage: /usr/bin/python3 usage_test.py --gemtb PATH --version-script cmake/GemtbVersionHeader.cmake
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

failures = 0


def check(cond, what):
    global failures
    print(f"{'ok  ' if cond else 'FAIL'} {what}")
    if not cond:
        failures += 1


def run(gemtb, *args):
    return subprocess.run([gemtb, *args], capture_output=True, text=True, timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemtb", required=True)
    ap.add_argument("--version-script", required=True)
    args = ap.parse_args()
    gemtb = args.gemtb

    r = run(gemtb, "--version")
    lines = r.stdout.splitlines()
    check(r.returncode == 0, "--version exits 0")
    check(len(lines) == 4, f"--version prints 4 lines: {lines}")
    check(bool(re.fullmatch(r"gemtb \d+\.\d+\.\d+", lines[0] if lines else "")), "version line")
    check(bool(re.fullmatch(r"commit ([0-9a-f]{12}(-modified)?|unknown)", lines[1] if len(lines) > 1 else "")),
          "commit line")
    check(bool(re.fullmatch(r"build \w+, CUDA (on|off)", lines[2] if len(lines) > 2 else "")), "build options line")
    check(bool(re.fullmatch(r"data .+ \((source tree|installed|GEMTB_DATA_DIR)\)", lines[3] if len(lines) > 3 else "")),
          "data folder line")

    groups = {
        "ref": ["train", "attention", "quantize", "compare", "embed"],
        "gpu": ["attention", "embed"],
        "bench": ["comm", "attention", "embed", "layers"],
        "golden": ["verify", "regen"],
        "data": ["generate"],
        "check": ["attention", "embed", "train"],
    }
    for group, subcommands in groups.items():
        r = run(gemtb, group)
        listed = [l.split()[0] for l in r.stdout.splitlines() if l.startswith("  ")]
        check(r.returncode == 2 and sorted(listed) == sorted(subcommands),
              f"'gemtb {group}' lists {subcommands} (rc {r.returncode}, listed {listed})")
        summaries = [l for l in r.stdout.splitlines() if l.startswith("  ")]
        check(all(len(l.split()) > 1 for l in summaries), f"'gemtb {group}': one line with a summary each")
        r = run(gemtb, group, "--help")
        check(r.returncode == 0 and "subcommands:" in r.stdout, f"'gemtb {group} --help' exits 0 with the list")
    r = run(gemtb, "ref", "nosuch")
    check(r.returncode == 2 and r.stderr.startswith("gemtb: error: unknown command 'ref nosuch'\n")
          and "  train " in r.stderr, "'gemtb ref nosuch' exits 2 naming it, the list on stderr")

    with tempfile.TemporaryDirectory() as d:
        header = os.path.join(d, "version_info.h")
        def write_header():
            subprocess.run(["cmake", f"-DSOURCE_DIR={d}", f"-DOUTPUT={header}", "-DVERSION=1.2.3",
                            "-DBUILD_TYPE=Release", "-DCUDA=OFF", "-P", args.version_script], check=True,
                           env=dict(os.environ, GIT_CEILING_DIRECTORIES=os.path.dirname(d)))
        write_header()
        with open(header) as f:
            text = f.read()
        check('#define GEMTB_COMMIT "unknown"' in text and '#define GEMTB_VERSION "1.2.3"' in text,
              "version header of a tree without git: commit unknown")
        os.utime(header, (0, 0))
        write_header()
        check(os.stat(header).st_mtime == 0, "version header not rewritten when unchanged")

    print("FAILED" if failures else "PASSED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
