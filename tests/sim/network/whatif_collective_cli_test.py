#!/usr/bin/env python3
"""gemtb whatif collective end to end on the compiled-in cluster (8-GPU H200 hosts, calibration
sim/calibration/h200.json): group sizes that do not fill hosts are refused, unmeasured host sizes are
extrapolated and say so, network groups take the published size-efficiency tables, and --sweep prints
one nccl-tests-style table; bad input exits 2 with one stderr line naming the flag."""
import argparse
import json
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gemtb", required=True)
    gemtb = parser.parse_args().gemtb
    failures = []

    def run(*args):
        return subprocess.run([gemtb, "whatif", "collective", *args], capture_output=True, text=True, timeout=60)

    def one(*args):
        r = run(*args, "--json")
        if r.returncode != 0:
            failures.append(f"{args}: exit {r.returncode}, {r.stderr!r}")
            return {}
        return json.loads(r.stdout)

    # 12 GPUs on 8-GPU hosts would be priced as 8 x 2: refused by name.
    for gpus, needle in (("12", "--gpus: 12 spans hosts of 8 GPUs without filling them"),
                         ("3004", "--gpus: 3004 spans hosts of 8 GPUs without filling them"),
                         ("3000", "--gpus: 3000 spans AI zones of 2048 GPUs without filling them")):
        r = run("--op", "all_gather", "--gpus", gpus, "--size", "1M")
        if r.returncode != 2 or needle not in r.stderr or len(r.stderr.strip().splitlines()) != 1:
            failures.append(f"--gpus {gpus}: exit {r.returncode}, stderr {r.stderr!r}")

    # An 8-GPU host is extrapolated from the 4-GPU measurement and never faster than it.
    four = one("--op", "all_gather", "--gpus", "4", "--size", "1M")
    eight = one("--op", "all_gather", "--gpus", "8", "--size", "1M")
    if eight.get("extrapolated_from_gpus") != 4 or "extrapolated_from_gpus" in four:
        failures.append(f"8 GPUs should say extrapolated from 4: {eight} / {four}")
    if not eight.get("time_us", 0) > four.get("time_us", 1e9):
        failures.append(f"8-GPU all_gather of 1 MiB {eight.get('time_us')} us is not above 4-GPU {four.get('time_us')}")
    r = run("--op", "all_gather", "--gpus", "8", "--size", "1M")
    if "extrapolated from the 4-GPU measurement" not in r.stdout:
        failures.append(f"text output should say it is extrapolated: {r.stdout!r}")

    # 2 hosts, 64 MiB all-reduce: the published 2-host eta (0.5 at 64 MiB) halves the bandwidth term
    # (the latency steps, ~21 us of the ~384 us, stay).
    on = one("--op", "all_reduce", "--gpus", "16", "--size", "64M")
    off = one("--op", "all_reduce", "--gpus", "16", "--size", "64M", "--no-eta")
    if not 1.9 * off.get("time_us", 1e9) < on.get("time_us", 0) < 2 * off.get("time_us", 0):
        failures.append(f"2-host 64 MiB all_reduce with eta {on} should take just under twice {off}")
    if not on.get("busbw_GBps", 1e9) < 200:
        failures.append(f"2-host 64 MiB all_reduce busbw {on.get('busbw_GBps')} GB/s should be below 200")

    # auto runs NCCL's algorithms only: a 64 MiB all-gather on 4,096 GPUs is a ring.
    ag = one("--op", "all_gather", "--gpus", "4096", "--size", "64M")
    if ag.get("algo") != "ring":
        failures.append(f"4,096-GPU all_gather should be NCCL's ring: {ag}")

    # --sweep: one table, nccl-tests columns, one row per size.
    r = run("--op", "all_reduce", "--gpus", "16", "--sweep", "1K:1M:4")
    rows = [line.split() for line in r.stdout.splitlines() if line and not line.startswith("#")]
    if r.returncode != 0 or [row[0] for row in rows] != ["1024", "4096", "16384", "65536", "262144", "1048576"]:
        failures.append(f"--sweep 1K:1M:4: exit {r.returncode}, rows {rows}")
    header = [line for line in r.stdout.splitlines() if line.startswith("#")]
    if len(header) < 2 or not all(w in header[1] for w in ("size", "count", "type", "time", "algbw", "busbw")):
        failures.append(f"--sweep header: {header}")
    if rows and (rows[0][1] != "512" or rows[0][2] != "bfloat16"):
        failures.append(f"--sweep count/type of 1 KiB all_reduce should be 512 bfloat16: {rows[0]}")
    for args, needle in ((("--sweep", "1K:1G"), "--sweep: \"1K:1G\" is not MIN:MAX:FACTOR"),
                         (("--sweep", "1G:1K:2"), "--sweep: MIN 1073741824 is above MAX 1024"),
                         (("--sweep", "1K:1G:1"), "--sweep FACTOR: \"1\" must be an integer >= 2"),
                         (("--sweep", "1K:1G:2", "--size", "1M"), "--size/--sweep: give exactly one of them")):
        r = run("--op", "all_reduce", "--gpus", "16", *args)
        if r.returncode != 2 or needle not in r.stderr:
            failures.append(f"{args}: exit {r.returncode}, stderr {r.stderr!r}")

    for f in failures:
        print("FAIL:", f)
    print("whatif collective CLI:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
