#!/usr/bin/env python3
"""Compares the per-step losses of two `gemtb train` logs (progress lines "step N loss X ...", one per
step with --log-every-s below a step's time): the same steps, every loss within --rel of the first
log's (relative) plus the 5 significant digits the lines print. Prints one line; exit 0 when they
agree, 1 when not, 2 when a log has no progress lines."""
import argparse
import re
import sys

LINE = re.compile(r"^step (\d+) loss (\S+) ")


def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            m = LINE.match(line)
            if m:
                out[int(m.group(1))] = float(m.group(2))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("base")
    ap.add_argument("other")
    ap.add_argument("--rel", type=float, default=1e-4)
    a = ap.parse_args()
    base, other = losses(a.base), losses(a.other)
    if not base or not other:
        print(f"compare: no progress lines in {a.base if not base else a.other}")
        return 2
    if sorted(base) != sorted(other):
        print(f"compare: {a.other} logs steps {sorted(other)[:5]}..., {a.base} {sorted(base)[:5]}...")
        return 1
    worst_step, worst = max(((s, abs(other[s] - base[s]) / max(abs(base[s]), 1e-30)) for s in base),
                            key=lambda x: x[1])
    ok = worst <= a.rel + 1e-5  # the lines' 5 digits
    print(f"compare {a.other} vs {a.base}: {len(base)} steps, largest relative loss difference {worst:.2e} "
          f"at step {worst_step}: {'OK' if ok else 'FAILED'} (bound {a.rel:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
