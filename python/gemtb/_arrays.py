"""Arrays across the binding: NumPy (or any DLPack producer) in, NumPy out.

An array goes to gemtb._core as (dtype name, shape, its bytes): dtypes are named as NumPy and
ml_dtypes name them ("float64", "bfloat16", ...). Wrong types raise TypeError, wrong layouts
ValueError, each naming the argument.
"""

import ml_dtypes
import numpy as np

_DTYPES = {
    "float64": np.dtype(np.float64),
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "int64": np.dtype(np.int64),
    "int32": np.dtype(np.int32),
    "uint8": np.dtype(np.uint8),
}
FLOATING = ("float64", "float32", "float16", "bfloat16")


def as_numpy(name, x):
    """`x` as a NumPy array: NumPy itself, or any object with __dlpack__ (a CPU tensor)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except (BufferError, TypeError, RuntimeError) as e:
            raise TypeError(f"{name}: cannot read it through DLPack on the CPU: {e}") from None
    raise TypeError(f"{name}: expected a NumPy array or a DLPack tensor, got {type(x).__name__}")


def to_wire(name, x, dtypes):
    """(dtype name, shape, uint8 view) of `x`, which must have one of `dtypes` and be C-contiguous."""
    a = as_numpy(name, x)
    dtype = a.dtype.name
    if dtype not in dtypes or a.dtype != _DTYPES[dtype]:
        raise TypeError(f"{name}: dtype {a.dtype}, want {' or '.join(dtypes)}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name}: not C-contiguous (strides {a.strides}); pass np.ascontiguousarray({name})")
    return dtype, list(a.shape), a.reshape(-1).view(np.uint8)


def from_wire(wire, raw=False):
    """The NumPy array of a (dtype name, shape, bytes) result; `raw`: 16-bit codes as uint16."""
    dtype, shape, data = wire
    if raw and dtype == "bfloat16":
        dtype = "uint16"
    return data.view(np.dtype(dtype) if dtype == "uint16" else _DTYPES[dtype]).reshape(shape)
