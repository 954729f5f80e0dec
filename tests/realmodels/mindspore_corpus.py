"""Real MindSpore model code from the registry, random init, fixed seeds, small enough to train a step in about a
second on 2 CPU cores (PyNative).

The builder returns a :class:`Case`: the model (``mindspore.nn.Cell``, in training mode), a batch, a loss function
called outside the model, and :func:`trainer`, the usual MindSpore training step
(``mindspore.value_and_grad(forward_fn, None, optimizer.parameters)`` and an optimizer).  The model code is the
package's own (``mindcv``'s ResNet-18: ``BasicBlock`` with ``out += identity``, a ``ReLU`` cell shared by both of
its uses in a block, ``BatchNorm2d`` through the ``BatchNorm`` Primitive); only the configuration is ours.  Nothing
is downloaded: weights are random.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tests.realmodels.case import SEED, Case


def trainer(case: Case, ms: Any, lr: float = 0.01, momentum: float = 0.9) -> tuple[Callable[[], tuple[Any, Any]], Any]:
    """``(grad_step, optimizer)``: ``grad_step()`` runs forward and backward on the batch and returns
    ``(loss, grads)`` (a float32 scalar tensor and a tuple with one gradient per trainable parameter, in
    ``optimizer.parameters`` order); ``optimizer(grads)`` applies them (``nn.Momentum``)."""
    optimizer = ms.nn.Momentum(case.model.trainable_params(), learning_rate=lr, momentum=momentum)

    def forward_fn(batch: dict[str, Any]) -> Any:
        return case.loss_of(case.model, batch)

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)
    return (lambda: grad_fn(case.batch)), optimizer


def state_bytes(model: Any) -> list[bytes]:
    """Every parameter of ``model`` (trainable ones and BatchNorm's ``moving_mean`` / ``moving_variance``), in
    ``parameters_and_names`` order, as its bytes."""
    return [p.asnumpy().tobytes() for _, p in model.parameters_and_names()]


def resnet18(ms: Any, images: int = 2, size: int = 64) -> Case:
    """``mindcv``'s ResNet-18 (20 ``BatchNorm2d``, 8 ``BasicBlock`` with ``out += identity``), 10 classes, a batch
    of ``images`` float32 images ``[images, 3, size, size]`` (its final pool is global: any size of at least 32
    works) and int32 labels ``[images]``; loss ``mindspore.ops.cross_entropy`` of the logits, outside the model.

    Raises:
        ImportError: without mindcv.
    """
    from mindcv.models import create_model

    ms.set_seed(SEED)
    model = create_model("resnet18", num_classes=10, pretrained=False)
    model.set_train(True)
    rs = np.random.RandomState(SEED + 1)
    batch = {
        "x": ms.Tensor(rs.randn(images, 3, size, size).astype(np.float32)),
        "y": ms.Tensor(rs.randint(0, 10, size=images).astype(np.int32)),
    }
    return Case("resnet18", model, batch, lambda m, b: ms.ops.cross_entropy(m(b["x"]), b["y"]))


BUILDERS: dict[str, Callable[..., Case]] = {"resnet18": resnet18}
