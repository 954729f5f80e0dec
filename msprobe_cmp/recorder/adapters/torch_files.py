"""Read the ``.pt`` tensor files of msprobe's PyTorch tensor-mode dumps (needs torch; no pickled code runs).

Register it with the dump reader so the comparator can read such dumps::

    from msprobe_cmp.dump.reader import register_tensor_loader
    from msprobe_cmp.recorder.adapters.torch_files import load_pt_tensor
    register_tensor_loader(".pt", load_pt_tensor)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from msprobe_cmp.errors import DumpFormatError, MissingFrameworkError


def load_pt_tensor(path: str | Path) -> np.ndarray:
    """Load one tensor saved with ``torch.save`` as a numpy array.

    Uses ``torch.load(path, weights_only=True, map_location="cpu")`` (torch's restricted unpickler: tensors
    and plain containers only, never arbitrary objects).  bfloat16 comes back as its raw 16-bit patterns
    (``uint16``), which :meth:`msprobe_cmp.dump.reader.RankDump.load_tensor` decodes when dump.json says
    ``torch.bfloat16`` (the same form the dump writer uses for ml_dtypes bfloat16).  Other dtypes keep
    numpy's equivalent (float16/32/64, ints, bool, complex64/128).

    Raises:
        MissingFrameworkError: when torch is not installed.
        DumpFormatError: when the file cannot be read, is refused by the restricted loader, does not hold a
            single tensor, or holds a dtype numpy cannot represent.
    """
    try:
        import torch
    except ImportError:
        raise MissingFrameworkError("torch") from None
    file = Path(path)
    try:
        value = torch.load(file, weights_only=True, map_location="cpu")
    except FileNotFoundError:
        raise DumpFormatError(file, None, "tensor file not found") from None
    except Exception as exc:  # unpickling errors, refused globals, truncated files
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DumpFormatError(file, None, f"not a readable .pt tensor file: {message[:200]}") from None
    if not isinstance(value, torch.Tensor):
        raise DumpFormatError(file, None, f"expected one tensor, found {type(value).__name__}")
    tensor = value.detach().resolve_conj().resolve_neg()
    if tensor.dtype == torch.bfloat16:
        return tensor.contiguous().view(torch.int16).numpy().view(np.uint16)
    try:
        return tensor.numpy()
    except (TypeError, RuntimeError) as exc:
        raise DumpFormatError(file, "dtype", f"tensor dtype {tensor.dtype} has no numpy equivalent: {exc}") from None
