"""Kernel time by kernel name in `gemtb train --trace-kernels --trace` traces (the Chrome/Perfetto
JSON: the last step's kernels as complete events of category "device"), one column per trace side by
side: launches and milliseconds per name, and each later trace's difference from the first. Names
lose their template arguments, parameters and namespaces, so one kernel's instances add up. A line
with each trace's total first; then the TOP names by their largest time in any trace, each line
after PREFIX.

Usage: python3 tools/lib/trace_kernel_table.py TRACE.json [TRACE.json ...] [--top N] [--prefix P]
"""
import argparse
import collections
import json
import os
import re
import sys


def short_name(name):
    """The kernel's own name: no template arguments, no parameter list, no namespaces."""
    depth, out = 0, []
    for ch in name:  # drop <...> (nested) first: template arguments hold '::' and '(' of their own
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    bare = re.sub(r"\(.*", "", "".join(out)).strip()
    bare = bare.split(" ")[-1]  # a return type before the name
    return bare.split("::")[-1] or name


def kernel_totals(path):
    """{short name: [launches, ms]} of the trace's device events."""
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    totals = collections.defaultdict(lambda: [0, 0.0])
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "device":
            continue
        t = totals[short_name(e["name"])]
        t[0] += 1
        t[1] += float(e["dur"]) * 1e-3  # trace times are microseconds
    return totals


def table(paths, top, prefix=""):
    columns = [kernel_totals(p) for p in paths]
    labels = [os.path.splitext(os.path.basename(p))[0] for p in paths]
    lines = [prefix + "  ".join(
        f"{label}: {sum(v[1] for v in c.values()):.3f} ms in {sum(v[0] for v in c.values())} launches"
        for label, c in zip(labels, columns))]
    names = sorted(set().union(*columns), key=lambda n: -max(c[n][1] if n in c else 0.0 for c in columns))
    header = "".join(f"{label[:18]:>26s}" for label in labels) + "".join(
        f"{'d ' + label[:14]:>18s}" for label in labels[1:])
    lines.append(prefix + header + "  kernel")
    for n in names[:top]:
        cells = [c.get(n, [0, 0.0]) for c in columns]
        row = "".join(f"{launches:8d}x {ms:10.3f} ms   " for launches, ms in cells)
        row += "".join(f"{cells[i][1] - cells[0][1]:+13.3f} ms  " for i in range(1, len(cells)))
        lines.append(prefix + row + n)
    return lines


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--prefix", default="")
    args = parser.parse_args(argv[1:])
    for line in table(args.traces, args.top, args.prefix):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
