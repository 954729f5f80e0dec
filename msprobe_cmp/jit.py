"""Compiling msprobe-cmp's numeric kernels with numba: one set of options, one on-disk cache rule.

Both kernels (the recorder's statistics pass, ``recorder/reduction.py``, and the comparator's fused tensor metrics,
``comparator/metrics.py``) are plain Python loops over numpy arrays compiled by :func:`compile_kernel` on first use.
Imported by the recorder and the comparator alike, so it sits below both (beside the dump format) and imports
nothing of the project; numba itself is imported only when a kernel is compiled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])


def compile_kernel(fn: F) -> F:
    """``fn`` compiled by numba with the options every kernel of the project uses.

    * ``nogil``: other Python threads (the comparator's chunk workers, the training's own threads) run meanwhile.
    * ``error_model="numpy"``: a division by zero gives Inf/NaN instead of raising, so loops have no branch.
    * ``fastmath={"reassoc"}`` only: the compiler may reassociate sums into vector lanes (each kernel documents
      the resulting error bound), with no FMA contraction and no assumption that values are finite.
    * ``cache=True``: the machine code for each argument type (~0.3-0.8 s to compile) is written beside the
      kernel's module in ``__pycache__`` (in ``NUMBA_CACHE_DIR`` when set, in numba's user-wide cache directory
      when ``__pycache__`` is not writable) and loaded by later processes until that module changes.  Where none
      of these is writable numba refuses the cache (``RuntimeError: cannot cache function``): the kernel is then
      compiled without one, in each process, rather than failing every call.

    Raises:
        ImportError: numba (a dependency of msprobe-cmp) is not installed.
    """
    import numba  # ~0.3 s and ~100 MB once: imported only when a kernel is needed

    def compiled(cache: bool) -> F:
        kernel: F = numba.njit(cache=cache, nogil=True, error_model="numpy", fastmath={"reassoc"})(fn)  # type: ignore[assignment]  # a Dispatcher calls as fn does
        return kernel

    try:
        return compiled(cache=True)
    except (RuntimeError, OSError):  # nowhere writable to cache it (read-only package, HOME and NUMBA_CACHE_DIR)
        return compiled(cache=False)
