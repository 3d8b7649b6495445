"""Kernel time by kernel name from an Nsight Compute CSV (`ncu --metrics gpu__time_duration.sum --csv
--print-units base`): a line with the kernels, launches and total milliseconds, then the TOP kernels
by total time (ms, share, launches, name), each line after PREFIX.

Usage: python3 tools/lib/ncu_kernel_table.py CSV [TOP] [PREFIX]
"""
import collections
import csv
import sys


def main(argv):
    path, top = argv[1], int(argv[2]) if len(argv) > 2 else 25
    prefix = argv[3] if len(argv) > 3 else ""
    rows = [line for line in open(path) if line.startswith('"')]
    total, count = collections.Counter(), collections.Counter()
    for r in csv.DictReader(rows):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r["Kernel Name"].split("(")[0][:90]
        total[name] += float(r["Metric Value"].replace(",", "")) * 1e-6
        count[name] += 1
    all_ms = sum(total.values())
    print(f"{prefix}{len(total)} kernels, {sum(count.values())} launches, {all_ms:.3f} ms of kernel time")
    for name, ms in total.most_common(top):
        share = 100 * ms / all_ms if all_ms > 0 else 0.0
        print(f"{prefix}{ms:10.3f} ms {share:5.1f}% {count[name]:6d}x  {name}")


if __name__ == "__main__":
    main(sys.argv)
