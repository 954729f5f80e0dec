"""A small valid tensor-task dump (three API entries, seven tensors as .npy) for tests that break or compare it.

``write_dump(root)`` writes ``root/step0/rank/{dump.json, stack.json, construct.json, dump_tensor_data/}`` by
hand (json + numpy, not through msprobe-cmp's writer), so reader and CLI tests do not depend on the code
under test to build their input.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

X = np.arange(12, dtype=np.float32).reshape(3, 4) / 7.0
W = np.linspace(-1.0, 1.0, 16, dtype=np.float32).reshape(4, 4)
Y = X @ W
ARRAYS = {
    "Functional.matmul.0.forward.input.0": X,
    "Functional.matmul.0.forward.input.1": W,
    "Functional.matmul.0.forward.output.0": Y,
    "Functional.relu.0.forward.input.0": Y,
    "Functional.relu.0.forward.output.0": np.maximum(Y, 0),
    "Functional.add.0.forward.input.0": X,
    "Functional.add.0.forward.output.0": X + 1,
}
ENTRIES = ("Functional.matmul.0.forward", "Functional.relu.0.forward", "Functional.add.0.forward")
#: The tensor file of relu's output (the one the corpus breaks).
RELU_OUT = "Functional.relu.0.forward.output.0.npy"


def _leaf(name: str) -> dict:
    a = ARRAYS[name].astype(np.float64)
    return {
        "type": "mindspore.Tensor", "dtype": "Float32", "shape": list(a.shape),
        "Max": float(a.max()), "Min": float(a.min()), "Mean": float(a.mean()), "Norm": float(np.linalg.norm(a)),
        "data_name": f"{name}.npy",
    }


def dump_json() -> dict:
    """The dump.json document of :func:`write_dump`."""
    data = {}
    for entry in ENTRIES:
        inputs = sorted(k for k in ARRAYS if k.startswith(entry + ".input."))
        outputs = sorted(k for k in ARRAYS if k.startswith(entry + ".output."))
        data[entry] = {"input_args": [_leaf(k) for k in inputs], "input_kwargs": {},
                       "output": [_leaf(k) for k in outputs]}
    return {"task": "tensor", "level": "L1", "framework": "mindspore", "dump_data_dir": None, "data": data}


def write_dump(root: Path) -> Path:
    """Write the dump under ``root``; returns its rank directory ``root/step0/rank``."""
    rank = root / "step0" / "rank"
    (rank / "dump_tensor_data").mkdir(parents=True)
    (rank / "dump.json").write_text(json.dumps(dump_json(), indent=1))
    (rank / "stack.json").write_text(json.dumps({e: ["File train.py, line 1, in <module>, x = f()"] for e in ENTRIES}))
    (rank / "construct.json").write_text(json.dumps({e: None for e in ENTRIES}))
    for name, arr in ARRAYS.items():
        np.save(rank / "dump_tensor_data" / f"{name}.npy", arr)
    return rank


def rank_with(parent: Path, text: str) -> Path:
    """``parent/rank/dump.json`` holding ``text`` as it is (malformed on purpose, for reader tests); the rank
    directory."""
    rank_dir = parent / "rank"
    rank_dir.mkdir(parents=True)
    (rank_dir / "dump.json").write_text(text)
    return rank_dir
