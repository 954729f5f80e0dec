"""The data of the cross-framework examples, shared by ``torch_api_mlp.py`` and ``mindspore_twin_mlp.py``
(numpy only): sizes, seeds, the initial parameters and the batch.

This recipe reproduces the parameter and input statistics msprobe 1.2.2 recorded for the fixture model
(``tests/data/msprobe-1.2.2-mindspore``, ``torch_statistics_a`` and ``statistics_a``, step 0) to 1e-7, so those
dumps are an independent oracle for recordings of both examples.
"""

from __future__ import annotations

import numpy as np

BATCH, WIDTH, OUT = 8, 16, 4
LEARNING_RATE = 1e-2
WEIGHT_SEED, DATA_SEED = 1234, 0


# (name, shape) in named_parameters() order; torch Linear and MindSpore Dense both store weight as [out, in].
PARAMETER_SHAPES: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("blocks.0.weight", (WIDTH, WIDTH)),
    ("blocks.0.bias", (WIDTH,)),
    ("blocks.1.weight", (WIDTH, WIDTH)),
    ("blocks.1.bias", (WIDTH,)),
    ("head.weight", (OUT, WIDTH)),
    ("head.bias", (OUT,)),
)


def make_parameters() -> dict[str, np.ndarray]:
    """The initial parameters: name → float32 array (shapes in ``PARAMETER_SHAPES``).

    ``RandomState(1234)``, one ``randn(*shape) / sqrt(shape[-1])`` per parameter in order, computed in float64 and
    cast to float32 (so a bias [n] is scaled by 1/sqrt(n): the head's bias by 1/2).  Found by matching the
    statistics msprobe recorded for the fixture model (tests/data/msprobe-1.2.2-mindspore, step 0).
    """
    rng = np.random.RandomState(WEIGHT_SEED)
    return {name: (rng.randn(*shape) / np.sqrt(shape[-1])).astype(np.float32) for name, shape in PARAMETER_SHAPES}


def make_batch() -> tuple[np.ndarray, np.ndarray]:
    """The one batch every step uses: ``x`` float32 [8, 16] and target ``y`` float32 [8, 4] (``RandomState(0)``)."""
    rng = np.random.RandomState(DATA_SEED)
    x = rng.randn(BATCH, WIDTH).astype(np.float32)
    y = rng.randn(BATCH, OUT).astype(np.float32)
    return x, y
