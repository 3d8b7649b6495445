"""gemtb.data.generate: `gemtb data generate` as a function returning the arrays."""

import json
import os

from . import _core
from ._arrays import from_wire


def generate(config="tiny", *, samples=1024, first=0, seed=1, data_params=None, threads=0):
    """Samples first .. first+samples-1 of the planted-teacher generator.

    Returns the arrays the command writes, by file name without ".npy" (lengths int32 [K*N] key-major,
    ids int64, seq_lengths int32 [J, N], dense float32 [N, m], surface int32 [N], labels and masks
    uint8 [N, T], probs float64 [N, T]) and "meta" (meta.json as a dict). Samples depend only on
    (config, seed, index): any split and any thread count give the same bytes.
    """
    if not isinstance(config, (str, os.PathLike)):
        raise TypeError(f"config: want a name or a path, got {type(config).__name__}")
    result = _core.data_generate(os.fspath(config), int(samples), int(first), int(seed),
                                 None if data_params is None else os.fspath(data_params), int(threads))
    out = {name: from_wire(w) for name, w in result.items() if name != "meta_json"}
    out["meta"] = json.loads(result["meta_json"])
    return out


__all__ = ["generate"]
