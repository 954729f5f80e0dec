"""A real MindSpore port of a real PyTorch model, recorded one training step on each side.

The PyTorch original is ``pytorchcv``'s ResNet-18 (``pytorchcv.models.resnet.resnet18``: ``ConvBlock``s nested
as ``features.stage1.unit1.body.conv1.conv``, in-place ReLUs, a fixed 7x7 ``AvgPool2d``, a ``Linear`` named
``output``); the MindSpore port is ``mindcv`` 0.3.0's ResNet-18 (``create_model("resnet18")``: ``layer1.0.conv1``,
``down_sample``, a ``ReLU`` cell used twice per block, ``GlobalAvgPooling`` through ``mean``, a ``Dense`` named
``classifier``).  The two are the same network with other names: :func:`copy_weights` gives the MindSpore model
the PyTorch model's weights and BatchNorm statistics, both see the same batch (2 images of 3x64x64 by default:
:func:`build_torch`, :data:`SIZE`), both train in train mode with the same loss (``mindspore.ops.cross_entropy`` /
``torch.nn.functional.cross_entropy``, mean over the batch) and the same SGD-with-momentum convention
(``nn.Momentum`` / ``torch.optim.SGD(momentum=0.9)``: ``v = m v + g``, ``p -= lr v``).

:func:`record_port` records one step of each with this project's recorder (level ``mix``) and returns the two dump
roots; its ``ms_patch`` / ``pt_patch`` callables change one side's model before recording, to inject a porting bug.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tests.realmodels.case import SEED

#: Learning rate and momentum of both optimisers.
LR, MOMENTUM = 0.01, 0.9
#: The batch: images, their default side and the classes.  64x64 rather than ResNet's 224x224: MindSpore's
#: PyNative step of ResNet-18 on 2 loaded CPU cores takes 30-110 s at 224 (and a tensor dump 750 MB a side), about
#: 6 s at 64.
IMAGES, SIZE, CLASSES = 2, 64, 10


def batch_arrays(size: int = SIZE) -> tuple[np.ndarray, np.ndarray]:
    """The batch both sides train on: float32 images ``[2, 3, size, size]`` (standard normal) and int64 labels
    ``[2]`` in ``[0, 10)``, from ``numpy.random.RandomState(SEED + 1)``."""
    rs = np.random.RandomState(SEED + 1)
    x = rs.randn(IMAGES, 3, size, size).astype(np.float32)
    y = rs.randint(0, CLASSES, size=IMAGES).astype(np.int64)
    return x, y


def build_torch(torch: Any, size: int = SIZE) -> Any:
    """pytorchcv's ResNet-18 with 10 classes, weights from ``torch.manual_seed(SEED)``, in train mode, for images of
    ``size`` x ``size`` (a multiple of 32).

    pytorchcv's final pool is ``AvgPool2d(kernel_size=7)``, the global pool of the 7x7 map a 224x224 image leaves;
    for another size it is replaced by ``AvgPool2d(kernel_size=size // 32, stride=1)``, the global pool of that
    map (same class, same computation).

    Raises:
        ImportError: without pytorchcv.
    """
    from pytorchcv.models.resnet import resnet18

    torch.manual_seed(SEED)
    model = resnet18(num_classes=CLASSES, in_size=(size, size))
    if size != 224:
        model.features.final_pool = torch.nn.AvgPool2d(kernel_size=size // 32, stride=1)
    return model.train()


def build_mindspore(ms: Any, faithful_pool: bool = True) -> Any:
    """mindcv's ResNet-18 with 10 classes (random weights, overwritten by :func:`copy_weights`), in train mode.

    mindcv's stem pool is ``nn.MaxPool2d(3, 2, pad_mode="same")``: on a 112x112 map it pads one row and column at
    the bottom and right only, where pytorchcv's ``MaxPool2d(3, 2, padding=1)`` pads one on every side, so the
    pooling windows are shifted by one and the two models differ from the pool on (msprobe-cmp finds it at that
    ``MaxPool``).  With ``faithful_pool`` (the default) the pool is replaced by
    ``nn.MaxPool2d(3, 2, pad_mode="pad", padding=1)``, the PyTorch model's, so that the port is correct.

    Raises:
        ImportError: without mindcv.
    """
    from mindcv.models import create_model

    ms.set_seed(SEED)
    model = create_model("resnet18", num_classes=CLASSES, pretrained=False)
    if faithful_pool:
        model.max_pool = ms.nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="pad", padding=1)
    model.set_train(True)
    return model


def copy_weights(ms_model: Any, pt_model: Any, ms: Any) -> list[tuple[str, str]]:
    """Give ``ms_model`` the values of ``pt_model``'s parameters and BatchNorm running statistics.

    What is paired, in definition order, and checked by shape: the MindSpore model's trainable parameters
    (``trainable_params()``: convolution weights, BatchNorm ``gamma`` / ``beta``, the classifier's ``weight`` /
    ``bias``) with the PyTorch model's ``parameters()`` (``conv.weight``, ``bn.weight`` / ``bn.bias``,
    ``output.weight`` / ``output.bias``); then its other parameters (BatchNorm ``moving_mean`` /
    ``moving_variance``) with the PyTorch floating-point buffers (``running_mean`` / ``running_var``;
    ``num_batches_tracked`` has no MindSpore counterpart).  Both models define their layers in the same order
    (a block's ``down_sample`` / ``identity_conv`` after its two convolutions).

    Returns:
        The ``(MindSpore name, PyTorch name)`` pairs, in order.

    Raises:
        ValueError: the two models do not have the same number of tensors, or a pair differs in shape.
    """
    ms_trainable = list(ms_model.trainable_params())
    trainable_ids = {id(p) for p in ms_trainable}
    ms_stats = [p for p in ms_model.get_parameters() if id(p) not in trainable_ids]
    pt_params = list(pt_model.named_parameters())
    pt_buffers = [(n, b) for n, b in pt_model.named_buffers() if b.is_floating_point()]
    pairs = []
    for ms_side, pt_side in ((ms_trainable, pt_params), (ms_stats, pt_buffers)):
        if len(ms_side) != len(pt_side):
            raise ValueError(f"{len(ms_side)} MindSpore tensors against {len(pt_side)} PyTorch tensors")
        for p, (name, t) in zip(ms_side, pt_side, strict=True):
            value = t.detach().cpu().numpy()
            if tuple(p.shape) != value.shape:
                raise ValueError(f"{p.name} {tuple(p.shape)} against {name} {value.shape}")
            p.set_data(ms.Tensor(value.copy()))
            pairs.append((p.name, name))
    return pairs


def record_torch(dump: Path, task: str = "statistics", patch: Callable[[Any], None] | None = None,
                 size: int = SIZE) -> Path:
    """Record one training step of the PyTorch original into ``dump`` (see :func:`record_port`); returns ``dump``."""
    import torch
    import torch.nn.functional as F

    from msprobe_cmp import PrecisionDebugger

    debugger = PrecisionDebugger(dump_path=str(dump), task=task, level="mix", framework="pytorch")
    model = build_torch(torch, size)
    if patch is not None:
        patch(model)
    x, y = (torch.from_numpy(a) for a in batch_arrays(size))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    opt.zero_grad()
    debugger.start(model)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    debugger.stop()
    opt.step()
    debugger.step()
    debugger.close()
    return dump


def record_mindspore(dump: Path, task: str = "statistics", patch: Callable[[Any], None] | None = None,
                     size: int = SIZE) -> Path:
    """Record one training step of the MindSpore port into ``dump`` (see :func:`record_port`); returns ``dump``."""
    import mindspore as ms
    import torch

    from msprobe_cmp import PrecisionDebugger

    debugger = PrecisionDebugger(dump_path=str(dump), task=task, level="mix", framework="mindspore")
    model = build_mindspore(ms)
    copy_weights(model, build_torch(torch, size), ms)
    if patch is not None:
        patch(model)
    xa, ya = batch_arrays(size)
    x, y = ms.Tensor(xa), ms.Tensor(ya.astype(np.int32))
    optimizer = ms.nn.Momentum(model.trainable_params(), learning_rate=LR, momentum=MOMENTUM)

    def forward_fn(images: Any, labels: Any) -> Any:
        return ms.ops.cross_entropy(model(images), labels)

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)
    debugger.start(model)
    _, grads = grad_fn(x, y)
    debugger.stop()
    optimizer(grads)
    debugger.step()
    debugger.close()
    return dump


def record_port(
    tmp_dir: str | Path,
    task: str = "statistics",
    ms_patch: Callable[[Any], None] | None = None,
    pt_patch: Callable[[Any], None] | None = None,
    size: int = SIZE,
) -> tuple[Path, Path]:
    """Record one training step of the MindSpore port and one of the PyTorch original (module docstring).

    Args:
        tmp_dir: an empty directory; the dumps go to ``<tmp_dir>/ms`` and ``<tmp_dir>/pt`` (``step0/rank/``).
        task: the recorder's task, ``"statistics"`` or ``"tensor"`` (level ``mix`` on both sides).
        ms_patch: called with the MindSpore model (weights already copied) before recording: a porting bug
            (``model.layer2.0.bn1.bn_train.epsilon``, a removed ReLU, ...).
        pt_patch: called with the PyTorch model before recording.
        size: the images' side, a multiple of 32 (:data:`SIZE` by default; 224 is ResNet's own).

    Returns:
        ``(MindSpore dump root, PyTorch dump root)``.

    Raises:
        ImportError: without mindspore, torch, mindcv or pytorchcv.
    """
    root = Path(tmp_dir)
    pt = record_torch(root / "pt", task, pt_patch, size)
    ms = record_mindspore(root / "ms", task, ms_patch, size)
    return ms, pt
