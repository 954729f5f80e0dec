"""One pass over a tensor's values for its statistics: Max, Min, the sum and the sum of squares, in float64.

The recorder's statistics (``collector.summarize``) come from :func:`reduce_values`, a loop compiled by numba (a
dependency of msprobe-cmp, already used by the comparator's tensor metrics): it reads the values once, in place,
where numpy needed a float64 copy and four passes over it (a 1.6M-element float32 activation: ~3.5 ms → ~0.6 ms;
a 64-element one: ~10 us → ~2-5 us).  Issue 18 measured the statistics at half of a recorded ResNet-18 step.

Numerics (docs/recorder.md, "Statistics and files"):

* Every element is upcast to float64 exactly before any arithmetic, so the square of a float32 is exact.
* Max and Min are exact: they are taken over the IEEE bit patterns mapped to integers that sort as the values
  (a sign-magnitude to two's-complement flip), which the compiler vectorises without assuming anything about NaN.
  A zero extreme keeps its sign by that order: Max is +0.0 when any element is +0.0, Min is -0.0 when any is -0.0.
  A NaN sorts beyond ±Inf; the caller makes all four statistics NaN when a NaN is present, as numpy's do.
* The sums are taken per block of :data:`SUM_BLOCK` elements, each summed by a loop the compiler may reassociate
  (numba ``fastmath`` flag ``reassoc`` only: no FMA contraction, no NaN/Inf assumptions) into interleaved partial
  sums, and the block sums added in order.  The rounding error is at most ~(terms per partial sum + blocks)·2⁻⁵³
  of the sum of the magnitudes (float64 throughout: ~1e-16 relative measured, against numpy's pairwise float64
  sums); the order depends on the array's length and the CPU's vector width only, so on one machine the same
  values give the same bits every time, and a PyTorch and a MindSpore recording of the same values agree bit
  for bit.  ±Inf and NaN propagate by IEEE rules (+Inf and -Inf together sum to NaN in any order).

The first tensor of a process imports numba and loads the compiled loop (~0.3 s and ~100 MB once; the machine
code for float32 and float64 arrays is compiled once, ~0.5 s each, and cached on disk as
:func:`msprobe_cmp.jit.compile_kernel` describes).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from msprobe_cmp.jit import compile_kernel

#: Elements per block of the sums (each block summed on its own, the block sums added in order); 256 keeps each
#: partial sum short at no measurable cost (the comparator's fused kernel measured the same for 256 to 65536).
SUM_BLOCK = 256

_Kernel = Callable[[np.ndarray, np.ndarray, object, object], tuple[float, float, float, float]]


def _reduce_kernel(
    values: np.ndarray, bits: np.ndarray, shift: object, mask: object
) -> tuple[float, float, float, float]:  # pragma: no cover - run compiled by numba (see _kernel); results tested
    """Max, Min, sum and sum of squares of ``values`` (1-D, C-contiguous, float32 or float64, at least 1 element).

    ``bits`` is the same memory viewed as integers of the same width (int32 / int64); ``shift`` is the width less
    one and ``mask`` the largest integer of that width, both of the integers' type.  ``k ^ ((k >> shift) & mask)``
    maps a bit pattern to an integer that sorts as the value (negative floats have their magnitude bits flipped)
    and back again.  Max and Min are returned as float64 (exact), the sums as float64 sums of float64 values.
    """
    key = bits[0]
    key ^= (key >> shift) & mask
    hi = key
    lo = key
    total = 0.0
    squares = 0.0
    for start in range(0, values.size, SUM_BLOCK):
        block = values[start: start + SUM_BLOCK]
        block_bits = bits[start: start + SUM_BLOCK]
        block_total = 0.0
        block_squares = 0.0
        for i in range(block.size):
            x = float(np.float64(block[i]))  # exact upcast (numba's float() alone keeps a float32 a float32)
            block_total += x
            block_squares += x * x
            key = block_bits[i]
            key ^= (key >> shift) & mask
            hi = max(hi, key)
            lo = min(lo, key)
        total += block_total
        squares += block_squares
    keys = np.empty(2, bits.dtype)
    keys[0] = hi ^ ((hi >> shift) & mask)
    keys[1] = lo ^ ((lo >> shift) & mask)
    extremes = keys.view(values.dtype)
    return float(np.float64(extremes[0])), float(np.float64(extremes[1])), total, squares


@functools.cache
def _kernel() -> _Kernel:
    """:func:`_reduce_kernel` compiled (:func:`~msprobe_cmp.jit.compile_kernel`: its options and on-disk cache), on
    the first tensor of the process."""
    return compile_kernel(_reduce_kernel)


#: The integer view, shift and mask of each dtype the kernel reads.
_BITS = {
    np.dtype(np.float32): (np.int32, np.int32(31), np.int32(0x7FFFFFFF)),
    np.dtype(np.float64): (np.int64, np.int64(63), np.int64(0x7FFFFFFFFFFFFFFF)),
}


def kernel_values(array: np.ndarray) -> np.ndarray:
    """``array``'s real values as the kernel reads them: 1-D, C-contiguous, float32 or float64.

    float32 and float64 arrays are read in place when C-contiguous (a non-contiguous one is copied in C order);
    float16, bfloat16 and the other floats of at most 4 bytes (ml_dtypes), bool and integers of at most 2 bytes
    become float32 (exactly); wider integers and anything else become float64 (integers beyond 2**53 round to
    the nearest float64, monotonically, so Max and Min are the rounded extremes).

    Raises:
        TypeError / ValueError: numpy cannot convert the dtype to a float (e.g. strings, objects).
    """
    dtype = array.dtype
    if dtype in _BITS:
        return array.reshape(-1)
    if dtype.itemsize <= 2 or (dtype.kind not in "iuc" and dtype.itemsize <= 4):
        return np.asarray(array, dtype=np.float32).reshape(-1)
    return np.asarray(array, dtype=np.float64).reshape(-1)


def reduce_values(values: np.ndarray) -> tuple[float, float, float, float]:
    """``(max, min, sum, sum of squares)`` of a non-empty array from :func:`kernel_values`, all float64.

    See the module docstring for the numerics (exact extremes, blocked float64 sums).  The first call of a
    process compiles or loads the kernel (~0.3-1 s once).

    Raises:
        ValueError: ``values`` is empty, not 1-D, or not float32 / float64.
        ImportError: numba (a dependency of msprobe-cmp) is not installed.
    """
    bits = _BITS.get(values.dtype)
    if bits is None or values.ndim != 1 or values.size == 0:
        raise ValueError(f"reduce_values takes a non-empty 1-D float32 or float64 array, got {values.dtype} "
                         f"of shape {values.shape}")
    view, shift, mask = bits
    values = np.ascontiguousarray(values)
    return _kernel()(values, values.view(view), shift, mask)
