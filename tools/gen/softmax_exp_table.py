#!/usr/bin/env python3
"""Prints the table of reference/attention/softmax_exp.h from its definition, in 80-digit decimals.

For i = 0..127, with s = 2^(i/128) rounded to the nearest double:
  table[2i]     = the bits of (2^(i/128) - s) / s rounded to the nearest double (s's relative error),
  table[2i + 1] = the bits of s minus i << 45 (the exponent the caller adds back from its k).
Run: python3 tools/gen/softmax_exp_table.py, and paste the lines into kSoftmaxExpTable.
"""
import struct
from decimal import Decimal, getcontext

getcontext().prec = 80


def bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def main():
    ln2 = Decimal(2).ln()
    words = []
    for i in range(128):
        exact = (ln2 * i / 128).exp()
        s = float(exact)  # float(Decimal) rounds to nearest
        tail = float((exact - Decimal(s)) / Decimal(s))
        words += [bits(tail), (bits(s) - (i << 45)) % (1 << 64)]
    for row in range(0, len(words), 4):
        print("    " + " ".join(f"0x{w:016x}," for w in words[row:row + 4]))


if __name__ == "__main__":
    main()
