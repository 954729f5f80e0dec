"""The comparator: match two dumps' rows, compute metrics, apply verdict rules (no framework, no I/O).

Public API: :func:`compare` and its records; the metric functions live in
:mod:`msprobe_cmp.comparator.metrics`, the rules in :mod:`msprobe_cmp.comparator.rules`, the
matching in :mod:`msprobe_cmp.comparator.matching`.
"""

from msprobe_cmp.comparator.compare import (
    CompareOptions,
    Comparison,
    ComparisonRow,
    SideSummary,
    UnitComparison,
    UnitRef,
    compare,
)
from msprobe_cmp.comparator.matching import MATCH_CLASSES, RowPair, RowPairs, match_entries
from msprobe_cmp.comparator.rules import Rules, ThresholdOverride, Thresholds

__all__ = [
    "MATCH_CLASSES",
    "CompareOptions",
    "Comparison",
    "ComparisonRow",
    "RowPair",
    "RowPairs",
    "Rules",
    "SideSummary",
    "ThresholdOverride",
    "Thresholds",
    "UnitComparison",
    "UnitRef",
    "compare",
    "match_entries",
]
