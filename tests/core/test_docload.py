"""Every document the twin parses goes through one bounded reader (issue 15, hole 3 and friends)."""

from __future__ import annotations

import resource
import time

import pytest

from twin.core.docload import MAX_DEPTH, MAX_INT_DIGITS, parse_document
from twin.core.errors import SpecError
from twin.core.scenario_io import read_mapping

LAUGHS = "a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))


def test_a_billion_laughs_is_refused_quickly_and_small(tmp_path):
    assert len(LAUGHS) < 600
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with pytest.raises(SpecError) as err:
        parse_document(LAUGHS, "scenario_yaml")
    assert err.value.field == "scenario_yaml" and "aliases" in str(err.value)
    # A file may use anchors, but not to expand without bound.
    f = tmp_path / "laughs.yaml"
    f.write_text(LAUGHS)
    with pytest.raises(SpecError) as err:
        read_mapping(f)
    assert err.value.field == str(f) and "expands to more than" in str(err.value)
    assert time.perf_counter() - t0 < 5.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KiB: < 200 MiB


def test_ordinary_anchors_in_a_file_still_work(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("base: &b {tp: 8, pp: 2}\nplan: *b\n")
    assert read_mapping(f)["plan"] == {"tp": 8, "pp": 2}


@pytest.mark.parametrize(("text", "words"), [
    ("n: " + "9" * 400, f"limit is {MAX_INT_DIGITS}"),
    ("n: " + "9" * 5001, f"limit is {MAX_INT_DIGITS}"),
    ("a: " + "[" * 5000 + "]" * 5000, "nested too deeply"),
    ("a: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5), "nested too deeply"),
    ('{"name": "\\ud800"}', "not valid Unicode"),
    ("a: [1, 2", "not valid YAML/JSON"),
    ("a: \x08", "not valid YAML/JSON"),
])
def test_hostile_documents_are_named_errors(text, words):
    with pytest.raises(SpecError) as err:
        parse_document(text, "scenario_yaml")
    assert err.value.field == "scenario_yaml" and words in str(err.value)


def test_json_files_get_the_same_limits(tmp_path):
    f = tmp_path / "s.json"
    f.write_text('{"n": ' + "9" * 5001 + "}")
    with pytest.raises(SpecError) as err:
        read_mapping(f)
    assert "integer" in str(err.value)
    f.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SpecError) as err:
        read_mapping(f)
    assert "nested too deeply" in str(err.value)


def test_binary_and_latin1_files_are_named_errors(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(SpecError) as err:
        read_mapping(f)
    assert err.value.field == str(f) and "not UTF-8" in str(err.value)
