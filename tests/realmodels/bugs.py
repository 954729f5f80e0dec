"""A corpus of realistic porting bugs injected into real model code, each recorded against its correct counterpart.

Every :class:`Bug` changes exactly one module of a real model (installed packages, random weights, fixed seeds) on
side A, the target; side B, the baseline, is the same model without the change.  ``Bug.changed`` is the changed
module's path as it appears in A's entry names (``Module.bert.<changed>.<Class>.forward.0`` for PyTorch,
``Cell.<changed>.<Class>.forward.0`` for MindSpore).

Two families:

- **BERT** (transformers 4.57.1 ``BertForMaskedLM``, the config of :func:`tests.realmodels.torch_corpus.bert`, 2
  layers, hidden 32, dropout 0.1, ``attn_implementation="eager"`` on both sides so that the attention scores are
  computed by BertSelfAttention's own Python code).  PyTorch against PyTorch; one training step (forward, backward)
  at level ``mix``.  The dropout draws come from ``torch.manual_seed(7)`` set right before the step on both sides.
- **port** (mindcv's ResNet-18 on MindSpore against pytorchcv's ResNet-18 on PyTorch with the same weights,
  ``tests/realmodels/port.py``): the bug is in the MindSpore side (A).

Each side is recorded once with task ``tensor`` (whose dumps carry the statistics as well): B once per family,
shared by all bugs of that family (:class:`Recorder`), A once per bug.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.realmodels import torch_corpus

#: The BERT of the corpus, with the attention computed in BertSelfAttention's Python code (not SDPA) on both sides.
BERT_OVERRIDES: dict[str, Any] = {"attn_implementation": "eager"}
#: Dropout draws of the recorded step come from this seed (both sides, set right before the step).
STEP_SEED = 7


@dataclass(frozen=True)
class Bug:
    """One injected porting bug.

    Attributes:
        name: a short identifier (``"layernorm_eps"``).
        title: one line for tables.
        description: what exactly is changed, and what the correct side does.
        family: ``"bert"`` (PyTorch against PyTorch) or ``"port"`` (MindSpore against PyTorch).
        changed: the changed module's path as A's entry names spell it (``"encoder.layer.1.attention.output.LayerNorm"``,
            ``"layer2.0.bn1"``).
        inject: applied to A's model (a ``torch.nn.Module`` / ``mindspore.nn.Cell``) after it is built, before the
            step is recorded.
    """

    name: str
    title: str
    description: str
    family: str
    changed: str
    inject: Callable[[Any], None]


# --------------------------------------------------------------------------------------------------
# BERT bugs


def _layernorm_eps(model: Any) -> None:
    model.get_submodule("bert.encoder.layer.1.attention.output.LayerNorm").eps = 1e-5


def _gelu_tanh(model: Any) -> None:
    import torch

    act = model.get_submodule("bert.encoder.layer.0.intermediate.intermediate_act_fn")  # GELUActivation
    # Looked up at call time: the recorder's wrapper of torch.nn.functional.gelu when it is installed.
    act.act = lambda x: torch.nn.functional.gelu(x, approximate="tanh")


class _ScaledHeadSize(int):
    """An ``int`` head size for the tensor shapes (``view`` uses ``__index__``) whose ``float()`` (what ``math.sqrt``
    reads) is ``1/factor`` of it: BertSelfAttention's ``scores / math.sqrt(self.attention_head_size)`` then scales
    the scores by ``sqrt(factor)`` more, and nothing else in the module changes."""

    factor: float

    def __new__(cls, value: int, factor: float) -> _ScaledHeadSize:
        obj = super().__new__(cls, value)
        obj.factor = factor
        return obj

    def __float__(self) -> float:
        return int(self) / self.factor


def _attention_scale(model: Any) -> None:
    attn = model.get_submodule("bert.encoder.layer.1.attention.self")
    attn.attention_head_size = _ScaledHeadSize(attn.attention_head_size, 2.0)
    assert math.sqrt(attn.attention_head_size) == math.sqrt(int(attn.attention_head_size) / 2)


def _transposed_query(model: Any) -> None:
    import torch

    query = model.get_submodule("bert.encoder.layer.0.attention.self.query")
    with torch.no_grad():
        query.weight.copy_(query.weight.detach().t().clone())


def _eval_layer(model: Any) -> None:
    model.get_submodule("bert.encoder.layer.1").eval()  # its three dropouts (p=0.1) off, on in B


BERT_BUGS: tuple[Bug, ...] = (
    Bug("layernorm_eps", "LayerNorm eps 1e-5 instead of 1e-12",
        "encoder layer 1's attention.output.LayerNorm built with eps=1e-5 (PyTorch's nn.LayerNorm default) instead "
        "of BERT's layer_norm_eps=1e-12; the other 4 LayerNorms keep 1e-12",
        "bert", "encoder.layer.1.attention.output.LayerNorm", _layernorm_eps),
    Bug("gelu_tanh", "GELU tanh-approximated instead of exact",
        "encoder layer 0's intermediate activation calls gelu(x, approximate='tanh') (hidden_act 'gelu_pytorch_tanh')"
        " instead of the exact erf GELU ('gelu'); layer 1 keeps the exact one",
        "bert", "encoder.layer.0.intermediate.intermediate_act_fn", _gelu_tanh),
    Bug("attention_scale", "attention scores scaled x sqrt(2)",
        "encoder layer 1's self-attention divides its scores by sqrt(head_size / 2) instead of sqrt(head_size) "
        "(its attention_head_size reads 16 for shapes, 8.0 for math.sqrt); layer 0 unchanged",
        "bert", "encoder.layer.1.attention.self", _attention_scale),
    Bug("transposed_query", "query weight copied transposed",
        "encoder layer 0's attention.self.query weight (32x32) is B's initial weight transposed (a weight copied "
        "between frameworks whose Linear/Dense layouts differ, without the transpose)",
        "bert", "encoder.layer.0.attention.self.query", _transposed_query),
    Bug("eval_layer", "one layer in eval mode (dropout off)",
        "encoder layer 1 in eval mode (its attention-probability, attention-output and output dropouts, p=0.1, do "
        "nothing and draw no random numbers) while the rest of the model trains; all of B trains",
        "bert", "encoder.layer.1", _eval_layer),
)


def record_bert(dump: Path, inject: Callable[[Any], None] | None = None, task: str = "tensor",
                level: str = "mix") -> Path:
    """Record one training step (forward and backward) of the corpus BERT into ``dump`` (a fresh directory), with
    ``inject(model)`` applied first when given; returns ``dump``.  The debugger is built before the model, so the
    activation functions the model stores are the recorder's wrappers."""
    import torch

    from msprobe_cmp import PrecisionDebugger

    debugger = PrecisionDebugger(dump_path=str(dump), framework="pytorch", task=task, level=level)
    try:
        case = torch_corpus.bert(torch, **BERT_OVERRIDES)
        if inject is not None:
            inject(case.model)
        opt = torch.optim.SGD(case.model.parameters(), lr=0.05)
        torch.manual_seed(STEP_SEED)
        torch_corpus.train_step(case, opt, debugger)
    finally:
        debugger.close()
    return dump


# --------------------------------------------------------------------------------------------------
# MindSpore-port bugs (side A = mindcv's ResNet-18 on MindSpore, side B = pytorchcv's ResNet-18 on PyTorch)


def _cell(model: Any, path: str) -> Any:
    return dict(model.cells_and_names())[path]


def _replace_batchnorm_op(bn: Any, eps: float | None = None, momentum: float | None = None) -> None:
    """Give a MindSpore ``nn.BatchNorm2d`` (built with eps 1e-5, momentum 0.9) new training and inference
    Primitives, as if it had been built with ``eps`` / ``momentum`` (MindSpore's convention: the weight of the old
    moving statistics; the Primitive takes ``1 - momentum``, the weight of the batch's)."""
    import mindspore as ms

    if eps is not None:
        bn.eps = eps
    if momentum is not None:
        bn.momentum = 1.0 - momentum  # what nn.BatchNorm2d stores
    bn.bn_train = ms.ops.BatchNorm(is_training=True, epsilon=bn.eps, momentum=bn.momentum, data_format=bn.format)
    bn.bn_infer = ms.ops.BatchNorm(is_training=False, epsilon=bn.eps, data_format=bn.format)


def _bn_eps(model: Any) -> None:
    _replace_batchnorm_op(_cell(model, "layer2.0.bn1"), eps=1e-3)


def _bn_momentum(model: Any) -> None:
    _replace_batchnorm_op(_cell(model, "layer3.0.bn2"), momentum=0.1)


def _same_padding(model: Any) -> None:
    import mindspore as ms

    conv = _cell(model, "layer3.0.conv1")  # 3x3, stride 2, 128 -> 256 channels
    conv.pad_mode, conv.padding = "same", 0
    conv.conv2d = ms.ops.Conv2D(out_channel=conv.out_channels, kernel_size=conv.kernel_size, mode=1,
                                pad_mode="same", pad=0, stride=conv.stride, dilation=conv.dilation,
                                group=conv.group, data_format=conv.data_format)


def _missing_relu(model: Any) -> None:
    relu = _cell(model, "layer2.1.relu")  # the block's one ReLU cell, used after bn1 and after the residual add
    relu.relu = lambda x: x  # nn.ReLU.construct returns self.relu(x): the ReLU Primitive is gone


PORT_BUGS: tuple[Bug, ...] = (
    Bug("bn_eps", "BatchNorm eps 1e-3 instead of 1e-5",
        "the MindSpore port's layer2.0.bn1 uses eps=1e-3 (Keras' default) where PyTorch's BatchNorm2d uses 1e-5; "
        "the other 19 BatchNorms keep 1e-5",
        "port", "layer2.0.bn1", _bn_eps),
    Bug("bn_momentum", "BatchNorm momentum 0.1 in MindSpore's convention",
        "the MindSpore port's layer3.0.bn2 is built with momentum=0.1, PyTorch's number, but MindSpore's momentum is "
        "the weight of the old moving statistics (PyTorch's 0.1 is MindSpore's 0.9): its moving mean and variance "
        "become 0.1 old + 0.9 batch instead of 0.9 old + 0.1 batch; the forward output (batch statistics) is unchanged",
        "port", "layer3.0.bn2", _bn_momentum),
    Bug("same_padding", "stride-2 conv with pad_mode='same' instead of padding=1",
        "the MindSpore port's layer3.0.conv1 (3x3, stride 2) uses pad_mode='same' (TensorFlow-style: no padding "
        "before, one row/column after) instead of pad_mode='pad', padding=1 (one on each side, as PyTorch): same "
        "output shape, values shifted by one pixel",
        "port", "layer3.0.conv1", _same_padding),
    Bug("missing_relu", "a block's ReLU missing (identity)",
        "the MindSpore port's layer2.1.relu computes the identity (its ReLU op dropped), so block layer2.1 applies "
        "neither of its two activations (after bn1, after the residual add)",
        "port", "layer2.1.relu", _missing_relu),
)


def port_available() -> bool:
    """True when tests/realmodels/port.py (the MindSpore <-> PyTorch ResNet-18 pair) can be imported."""
    try:
        from tests.realmodels import port  # noqa: F401
    except ImportError:
        return False
    return True


def all_bugs() -> tuple[Bug, ...]:
    """Every bug of the corpus: the BERT ones, then the port ones (when tests/realmodels/port.py exists)."""
    return BERT_BUGS + (PORT_BUGS if port_available() else ())


def _record_port_side(dump: Path, side: str, inject: Callable[[Any], None] | None, task: str = "tensor") -> Path:
    """Record one side (``"ms"`` or ``"pt"``) of the port pair into ``dump`` (port.py's default image size), with
    ``inject`` applied to that side's model (port.py's one-side recorders)."""
    from tests.realmodels import port

    record = port.record_mindspore if side == "ms" else port.record_torch
    return Path(record(dump, task, inject))


# --------------------------------------------------------------------------------------------------
# Recording


class Recorder:
    """Records the corpus into ``root``, each dump once: each family's correct side B (``bert-B``: the BERT;
    ``port-B``: pytorchcv's ResNet-18), each bug's side A (``<bug>-A``), and the controls: a rerun of the BERT
    (``bert-B-rerun``) and the MindSpore port without a bug (``port-A-ok``)."""

    def __init__(self, root: Path, task: str = "tensor") -> None:
        self.root = Path(root)
        self.task = task
        self.seconds: dict[str, float] = {}
        self._done: dict[str, Path] = {}

    def _record(self, key: str, family: str, side: str, inject: Callable[[Any], None] | None) -> Path:
        import time

        if key not in self._done:
            dump = self.root / key
            start = time.perf_counter()
            if family == "bert":
                record_bert(dump, inject, task=self.task)
            elif family == "port":
                _record_port_side(dump, side, inject, task=self.task)
            else:
                raise ValueError(f"unknown family {family!r}")
            self.seconds[key] = time.perf_counter() - start
            self._done[key] = dump
        return self._done[key]

    def baseline(self, family: str) -> Path:
        """The dump of ``family``'s correct side B."""
        return self._record(f"{family}-B", family, "pt", None)

    def control(self, family: str) -> tuple[Path, Path]:
        """``(A, B)`` without a bug: the BERT against a rerun of itself; the MindSpore port against PyTorch."""
        if family == "bert":
            return self._record("bert-B-rerun", "bert", "pt", None), self.baseline("bert")
        return self._record("port-A-ok", "port", "ms", None), self.baseline("port")

    def pair(self, bug: Bug) -> tuple[Path, Path]:
        """``(A, B)`` dumps of ``bug``: the buggy target and the correct baseline."""
        return self._record(f"{bug.name}-A", bug.family, "ms", bug.inject), self.baseline(bug.family)


# --------------------------------------------------------------------------------------------------
# What a comparison says about a bug


def compare_dumps(a: Path, b: Path, mode: str) -> Any:
    """The :class:`~msprobe_cmp.comparator.result.Comparison` of dump ``a`` (target) against ``b`` (baseline) in
    ``mode`` (``"statistics"`` or ``"tensor"``), default rules."""
    from msprobe_cmp.comparator.compare import CompareOptions, compare
    from msprobe_cmp.dump.reader import load_dump

    return compare(load_dump(a), load_dump(b), CompareOptions(mode=mode))  # type: ignore[arg-type]


def in_module(name: str | None, fragment: str) -> bool:
    """True when entry / row name ``name`` lies in the module path ``fragment`` (whole dotted components:
    ``encoder.layer.1`` is in ``Module.bert.encoder.layer.1.attention...``, not in ``...encoder.layer.10...``)."""
    return bool(name) and re.search(r"(^|\.)" + re.escape(fragment) + r"\.", name or "") is not None


def origin_names_module(comparison: Any, fragment: str) -> bool:
    """Whether the comparison's likely origin names the changed module: ``fragment`` in the origin row's entry name
    (A's, or B's own across frameworks) or in its innermost enclosing cell; False when it found no origin."""
    origin = comparison.likely_origin
    if origin is None:
        return False
    row = comparison.row(origin.ref)
    names = (origin.ref.name, origin.cell, row.entry_name_b, origin.ref.parent_cell)
    return any(in_module(n, fragment) for n in names)


def _row_error(row: Any) -> float | None:
    from msprobe_cmp.comparator.result import LOWER_BOUND_NAME

    value = row.metric("MaxAbsErr")
    return value if value is not None else row.metric(LOWER_BOUND_NAME)


@dataclass(frozen=True)
class Outcome:
    """What one comparison of a bug's A against its B found.

    Attributes:
        verdict: the comparison's verdict; fails / warnings: rows with that verdict.
        detected: verdict ``fail`` or some row with verdict ``warning``.
        first_divergent, first_failing: row names (with their unit), or None.
        origin, origin_cell: the likely origin's row name and innermost enclosing cell (None when there is none, or
            no such attribute yet); origin_text: its one-line description.
        origin_names_changed: :func:`origin_names_module`.
        changed_err, changed_row: the largest MaxAbsErr (statistics mode: its lower bound) of a row inside the
            changed module, and that row; other_err, other_row: the same outside it.
        changed_fail: rows inside the changed module that fail or warn.
    """

    verdict: str
    fails: int
    warnings: int
    detected: bool
    first_divergent: str | None
    first_failing: str | None
    origin: str | None
    origin_cell: str | None
    origin_text: str | None
    origin_names_changed: bool
    changed_err: float | None
    changed_row: str | None
    other_err: float | None
    other_row: str | None
    changed_fail: int


def outcome(comparison: Any, fragment: str) -> Outcome:
    """Sum up ``comparison`` for a bug that changed the module ``fragment``."""
    counts = dict(comparison.verdict_counts)
    best: dict[bool, tuple[float, str]] = {}
    changed_fail = 0
    for unit in comparison.units:
        for row in unit.rows:
            chain = (row.entry_name, row.entry_name_b, *unit.parent_chains.get(row.entry_name, ()))
            inside = any(in_module(n, fragment) for n in chain)
            if inside and row.verdict in ("fail", "warning"):
                changed_fail += 1
            err = _row_error(row)
            if err is not None and row.differs and err > best.get(inside, (-1.0, ""))[0]:
                best[inside] = (err, row.name)
    origin = comparison.likely_origin
    return Outcome(
        verdict=comparison.verdict, fails=counts.get("fail", 0), warnings=counts.get("warning", 0),
        detected=comparison.verdict == "fail" or counts.get("warning", 0) > 0,
        first_divergent=comparison.first_divergent.name if comparison.first_divergent else None,
        first_failing=comparison.first_failing.name if comparison.first_failing else None,
        origin=origin.ref.name if origin is not None else None,
        origin_cell=(origin.cell or origin.ref.parent_cell) if origin is not None else None,
        origin_text=origin.text if origin is not None else None,
        origin_names_changed=origin_names_module(comparison, fragment),
        changed_err=best[True][0] if True in best else None, changed_row=best[True][1] if True in best else None,
        other_err=best[False][0] if False in best else None, other_row=best[False][1] if False in best else None,
        changed_fail=changed_fail,
    )
