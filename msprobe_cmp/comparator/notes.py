"""Structured row notes: each note is the text a reader sees, a code from :data:`NOTE_CODES` and its parameters.

A row's notes say what to keep in mind about it (a dtype upcast, non-finite values left out, a fallback, an
argument the other framework's API does not take).  The comparator decides things from a note's :attr:`Note.code`,
never from its words: which unpaired rows are structural (:data:`STRUCTURAL`), which note of a row null on both
sides goes first.  The parameters are what a program reading a saved comparison needs without parsing the text
(shapes, dtypes, counts, paths), JSON values only.

A :class:`Note` is a ``str`` (its text), so tables, joins, the CSV, ``comparison.json`` and the page use it as text
unchanged; the saved comparison stores the code and parameters beside the text and loads them back
(:mod:`msprobe_cmp.comparator.saved`).  The codes and what each means are listed in docs/contracts.md (its section
on this module).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

#: Every note code and what a note of it says.  A code is never reused for another meaning.
NOTE_CODES: Mapping[str, str] = {
    # pairing (matching, mapping, fused calls)
    "null_both": "the slot is null on both sides: nothing recorded",
    "null_one_side": "the slot is null on one side: no data recorded there (param side)",
    "kinds_differ": "one side holds a tensor, the other a value (params a, b: what each is)",
    "dtype_differs": "the dtypes differ and do not compare (params a, b)",
    "uncaptured_leaf": "a tensor leaf without statistics, checksum or file (param sides)",
    "grads_fit_no_input": "a side's backward gradients fit none of its forward call's inputs: no gradient pairs "
                          "(params side, forward, shapes)",
    "shape_differs": "the two tensors' shapes differ (params a, b: the shapes)",
    "dtype_differs_too": "beside a shape difference, the dtypes differ (params a, b)",
    "size1_dims": "the shapes differ only in size-1 dimensions: compared by value, flattened (params a, b)",
    "compatible_dtypes": "the dtypes differ but compare (params a, b, how)",
    "aligned_by_order": "the call was aligned by call order with B's call of another index (param name_b)",
    "grad_by_forward_input": "backward outputs paired by the forward input they are the gradient of (param canonical)",
    "transposed": "B's tensor is compared as the transpose of A's (param recorded_by: the side whose layout it is)",
    "names_mapped": "the names were mapped across frameworks (param mapped_by)",
    "argument_not_taken": "an argument the other framework's API does not take: no counterpart by construction "
                          "(params target, source)",
    "framework_plumbing": "a framework's plumbing call: no counterpart by construction (param reason)",
    "intermediate": "an intermediate result of a composite of Primitives: no counterpart in PyTorch "
                    "(params primitives, api)",
    "fused_members": "which calls of the other side a fused call's parts were found among (param detail)",
    "fused_compared_with": "a fused call's slot null on both sides, compared with its parts (param label)",
    "fused_shared_input": "an input every part of a fused call shares, compared with each part's (params what, part)",
    "fused_sum": "a fused call's input gradient compared as the sum of its parts' (params label, path)",
    "fused_concatenation": "a fused call's tensor compared as the concatenation of its parts' (params label, path, "
                           "dim)",
    "fused_not_combined": "a fused call or some of its parts were not recorded: not combined (params missing, "
                          "source)",
    "fused_slot_not_combined": "a slot not recorded by the fused call and every part: not combined (params path, "
                               "label, source)",
    "fused_not_concatenation": "the fused tensor is not the concatenation of its parts' along either declared dim "
                               "(params shape, label, shapes, dims, source)",
    "not_captured": "the side without the row declared that its recorder could not capture it (params side, reason)",
    # one row's comparison (outcomes, metrics)
    "nonfinite_stat_agrees": "a statistic is the same non-finite value on both sides: not compared (params stat, "
                             "value)",
    "reduction_overflow": "one recorder's float32 reduction overflowed while Max and Min agree: not compared "
                          "(params stat, a, b)",
    "stats_one_side": "statistics recorded on one side only (param stats)",
    "invalid_nonfinite_counts": "a side's NaN/Inf counts are not valid counts: ignored (param side)",
    "bf16_stored_as_f32": "a side's bfloat16 tensor file holds float32, msprobe's convention (param side)",
    "file_dtype_differs": "a side's tensor file holds another dtype than dump.json states (params side, stored, "
                          "stated)",
    "empty_both": "an empty tensor (0 elements) on both sides: equal",
    "fallback_to_statistics": "the mode in force could not compare the row; its statistics were (param why)",
    "complex_values": "complex values: real and imaginary parts compared as one real vector",
    "nonfinite_left_out": "non-finite values at the same positions with the same signs were left out (params "
                          "agreeing, compared)",
    "cosine_undefined": "the cosine similarity is undefined (params compared, all_zero: the side that is all zero, "
                        "or null)",
    "float32_rounding": "two float values equal to float32 rounding (params a, b)",
    "value_types_differ": "the two values' types differ (params a, b)",
    "same_value_spelt_twice": "one dtype or device in two spellings (params what, a, b)",
    "where_written_differs": "an argument saying where the result is written differs (params argument, a, b)",
    "device_differs": "the device a result is placed on differs (params argument, a, b)",
    "beyond_noise": "a failing row beyond the run-to-run noise (param noise: how much the rerun differs)",
    # reasons the comparator decides from (other reasons are plain text)
    "cosine_below": "a tensor row's Cosine is below the failing threshold (params cosine, threshold)",
    "cosine_suspect": "a tensor row's Cosine is below the suspect threshold while its MaxAbsErr is above its "
                      "(params cosine, threshold, max_abs_err, max_abs_err_threshold)",
    "argument_differs": "a call argument differs (params argument, a, b)",
    # localisation
    "rounding_noise": "both sides at rounding-noise magnitude: the cosine decides nothing (params magnitude, "
                      "reference; was: the reasons of the Cosine-only verdict it replaced, or null)",
}

#: Codes of notes on rows with no counterpart by construction: such rows, unpaired, do not count against the matched
#: share (:func:`msprobe_cmp.comparator.mapping.is_structural_note`).
STRUCTURAL = frozenset({"argument_not_taken", "framework_plumbing", "intermediate"})

_JSON_SCALARS = (str, int, float, bool, type(None))


def _plain(value: Any) -> Any:
    """``value`` as a JSON value: tuples become lists, mappings objects with text keys, numpy scalars numbers;
    anything else its ``repr`` (a note never stops a comparison)."""
    if isinstance(value, _JSON_SCALARS):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:
        return _plain(item())
    return repr(value)


class Note(str):
    """One row note: its text (this ``str``), its :attr:`code` (a key of :data:`NOTE_CODES`) and :attr:`params`.

    Equality and hashing are the text's: two notes of one text are one note in the row table's interned tuples (a
    text is written from its code and parameters, so it names them).

    Attributes:
        code: what kind of note it is (:data:`NOTE_CODES`).
        params: the values its text was written from, JSON values only (shapes as lists, dtypes as text).
    """

    code: str
    params: Mapping[str, Any]

    def __new__(cls, text: str, code: str, params: Mapping[str, Any] | None = None) -> Note:
        if code not in NOTE_CODES:
            raise ValueError(f"unknown note code {code!r}")
        self = super().__new__(cls, text)
        self.code = code
        self.params = {k: _plain(v) for k, v in (params or {}).items()}
        return self

    def __reduce__(self) -> tuple[Callable[..., Note], tuple[str, str, Mapping[str, Any]]]:
        return (Note, (str(self), self.code, self.params))

    def rewritten(self, rewrite: Callable[[str], str]) -> Note:
        """This note with ``rewrite`` applied to its text and to every text parameter (the report's relative
        paths: :func:`msprobe_cmp.reports.paths.relative_paths`)."""
        params = {k: rewrite(v) if isinstance(v, str) else v for k, v in self.params.items()}
        return Note(rewrite(str(self)), self.code, params)

    def params_json(self) -> str:
        """:attr:`params` as compact JSON text (NaN and infinities as the tokens ``NaN``, ``Infinity``)."""
        return json.dumps(self.params, separators=(",", ":"), ensure_ascii=False, allow_nan=True)


def note(code: str, text: str, **params: Any) -> Note:
    """A :class:`Note` of ``code`` whose text is ``text``, written from ``params``.

    Raises:
        ValueError: ``code`` is not in :data:`NOTE_CODES`.
    """
    return Note(text, code, params)


def code_of(text: str) -> str | None:
    """The code of ``text`` when it is a :class:`Note`, else None (a reason, a stack frame)."""
    return text.code if isinstance(text, Note) else None


def rewrite_text(text: str, rewrite: Callable[[str], str]) -> str:
    """``rewrite(text)``, a :class:`Note` keeping its code (:meth:`Note.rewritten`)."""
    return text.rewritten(rewrite) if isinstance(text, Note) else rewrite(text)


def restore(text: str, code: str, params_json: str) -> Note:
    """The note a saved comparison stored as its text, code and :meth:`Note.params_json`.

    Raises:
        ValueError: an unknown code, or parameters that are not a JSON object.
    """
    params = json.loads(params_json)
    if not isinstance(params, dict):
        raise ValueError("note parameters are not a JSON object")
    return Note(text, code, params)

