"""Read the ``.pt`` tensor files of msprobe's PyTorch tensor-mode dumps (needs torch; no pickled code runs).

Register it with the dump reader so the comparator can read such dumps::

    from msprobe_cmp.dump.reader import register_tensor_loader
    from msprobe_cmp.recorder.adapters.torch_files import load_pt_tensor
    register_tensor_loader(".pt", load_pt_tensor)
"""

from __future__ import annotations

import warnings
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np

from msprobe_cmp.errors import DumpFormatError, MissingFrameworkError


def load_pt_tensor(path: str | Path) -> np.ndarray:
    """Load one tensor saved with ``torch.save`` as a numpy array.

    Uses ``torch.load(path, weights_only=True, map_location="cpu")`` (torch's restricted unpickler: tensors
    and plain containers only, never arbitrary objects), with torch's warnings silenced.  A zip archive with a
    compressed member is refused before loading: ``torch.save`` stores members uncompressed, so compression
    only serves to make a small file inflate into a huge one.  bfloat16 comes back as an
    ``ml_dtypes.bfloat16`` array (its values, whatever dtype dump.json states).  Other dtypes keep numpy's
    equivalent (float16/32/64, ints, bool, complex64/128).

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
        if zipfile.is_zipfile(file):
            with zipfile.ZipFile(file) as archive:
                if any(info.compress_type != zipfile.ZIP_STORED for info in archive.infolist()):
                    raise DumpFormatError(file, None, "compressed .pt archive refused (torch.save stores members "
                                          "uncompressed)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = torch.load(file, weights_only=True, map_location="cpu")
    except DumpFormatError:
        raise
    except FileNotFoundError:
        raise DumpFormatError(file, None, "tensor file not found") from None
    except Exception as exc:  # unpickling errors, refused globals, truncated files
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DumpFormatError(file, None, f"not a readable .pt tensor file: {message[:200]}") from None
    if not isinstance(value, torch.Tensor):
        raise DumpFormatError(file, None, f"expected one tensor, found {type(value).__name__}")
    tensor = value.detach().resolve_conj().resolve_neg()
    if tensor.dtype == torch.bfloat16:
        return tensor.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    try:
        return tensor.numpy()
    except (TypeError, RuntimeError) as exc:
        raise DumpFormatError(file, "dtype", f"tensor dtype {tensor.dtype} has no numpy equivalent: {exc}") from None
