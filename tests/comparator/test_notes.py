"""Row notes are structured (comparator/notes.py): a code and JSON parameters beside the text, kept through pickling,
path rewriting and the comparator's own decisions; every note a real comparison writes has a code."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import numpy as np
import pytest

from msprobe_cmp.comparator import compare
from msprobe_cmp.comparator.mapping import is_structural_note
from msprobe_cmp.comparator.notes import NOTE_CODES, STRUCTURAL, Note, code_of, note, restore, rewrite_text
from msprobe_cmp.dump import load_dump

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "contracts.md"


def test_a_note_is_its_text_with_a_code_and_json_parameters():
    n = note("shape_differs", "shape differs: A [2, 2], B [4]", a=(2, 2), b=[np.int64(4)])
    assert n == "shape differs: A [2, 2], B [4]" and hash(n) == hash("shape differs: A [2, 2], B [4]")
    assert n.code == "shape_differs" and code_of(n) == "shape_differs"
    assert n.params == {"a": [2, 2], "b": [4]}  # a tuple is a list, a numpy scalar a number
    assert type(n.params["b"][0]) is int
    assert "; ".join((n, "x")) == "shape differs: A [2, 2], B [4]; x"  # used as text unchanged
    assert code_of("shape differs: A [2, 2], B [4]") is None  # the same words without a code are a plain text


def test_an_unknown_code_is_refused_and_an_odd_parameter_is_its_repr():
    with pytest.raises(ValueError, match="unknown note code 'nope'"):
        note("nope", "text")
    odd = note("value_types_differ", "t", a=Ellipsis, b={"k": (1, 2)})
    assert odd.params == {"a": "Ellipsis", "b": {"k": [1, 2]}}


def test_pickling_keeps_code_and_parameters():
    n = note("nonfinite_stat_agrees", "max is nan on both sides (not compared)", stat="max", value=math.nan)
    back = pickle.loads(pickle.dumps(n))
    assert type(back) is Note and back == n and back.code == n.code and back.params["stat"] == "max"
    assert math.isnan(back.params["value"])


def test_params_json_round_trips_non_finite_values():
    n = note("reduction_overflow", "t", stat="norm", a=math.inf, b=3.5e38)
    back = restore(str(n), n.code, n.params_json())
    assert back.params == {"stat": "norm", "a": math.inf, "b": 3.5e38} and back.code == "reduction_overflow"
    with pytest.raises(ValueError, match="not a JSON object"):
        restore("t", "empty_both", "[1]")


def test_rewriting_a_note_keeps_its_code_and_rewrites_its_text_parameters():
    n = note("fused_compared_with", "compared with /data/run_a/x", label="/data/run_a/x")
    out = rewrite_text(n, lambda t: t.replace("/data/run_a", "A"))
    assert out == "compared with A/x" and out.code == "fused_compared_with" and out.params == {"label": "A/x"}
    assert rewrite_text("plain /data/run_a", lambda t: t.replace("/data/run_a", "A")) == "plain A"


def test_structural_rows_are_recognised_by_code_not_by_words():
    worded = "framework plumbing (a shape query): no counterpart by construction"
    assert not is_structural_note(worded)  # words alone decide nothing
    assert is_structural_note(note("framework_plumbing", worded, reason="a shape query"))
    assert not is_structural_note(note("names_mapped", "no counterpart by construction", mapped_by="x"))
    assert STRUCTURAL <= set(NOTE_CODES)


@pytest.mark.parametrize("target, baseline", [
    ("tensor_b", "tensor_a"), ("statistics_b", "statistics_a"), ("statistics_a", "torch_statistics_a"),
])
def test_every_note_of_a_real_comparison_has_a_code(target, baseline):
    c = compare(load_dump(FIXTURES / target), load_dump(FIXTURES / baseline))
    codes = set()
    for u in c.units:
        for k in np.unique(u.rows.notes).tolist():
            for n in u.rows.tuples[k]:
                assert code_of(n) in NOTE_CODES, n
                codes.add(code_of(n))
    if "torch" in target + baseline:  # the cross-framework pair's plumbing and composites
        assert {"framework_plumbing", "intermediate", "names_mapped"} <= codes


def test_the_contract_lists_every_code_with_its_meaning():
    text = DOCS.read_text(encoding="utf-8")
    missing = [code for code, meaning in NOTE_CODES.items() if f"- `{code}`: {meaning}\n" not in text]
    assert not missing, missing


def test_the_comparator_decides_from_codes_of_reasons_too():
    from msprobe_cmp.comparator.rules import compute_argument_verdict

    out = compute_argument_verdict("eps", 1e-5, 1e-12)
    assert out.reasons == ("argument differs: eps A 1e-05, B 1e-12",)
    assert code_of(out.reasons[0]) == "argument_differs" and out.reasons[0].params == {"argument": "eps", "a": 1e-5,
                                                                                        "b": 1e-12}
