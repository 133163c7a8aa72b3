"""Every document the twin parses goes through one bounded reader (issue 15, hole 3 and friends)."""

from __future__ import annotations

import resource
import time

import pytest
import yaml

from twin.core.docload import FAST_CHARS, MAX_DEPTH, MAX_INT_DIGITS, parse_document
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


PAD = " " * (FAST_CHARS + 1)  # past FAST_CHARS: libyaml's parser (issue 39: an 8 MiB document cost 7.1 s)


@pytest.mark.parametrize(("text", "words"), [
    ("a: " + "[" * 70_000 + "]" * 70_000, "nested too deeply"),
    ("a: !!python/object:os.system x" + PAD, "could not determine a constructor"),
    ("a: &a [1]\nb: *a" + PAD, "aliases"),
    ("x: " + "9" * 70_000, "an integer of 70000 digits"),
    ("a: \x01" + PAD, "control characters"),
    ('{"name": "\\ud800"}' + PAD, "not valid YAML/JSON"),
])
def test_large_documents_keep_every_limit(text, words):
    with pytest.raises(SpecError) as err:
        parse_document(text, "scenario_document")
    assert err.value.field == "scenario_document" and words in str(err.value)


def test_a_large_document_reads_as_the_small_parser_reads_it():
    data = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "plan": {"tp": 8, "gbs": 64},
            "notes": [f"note {i}: {'x' * 40}" for i in range(3000)], "n": [1, 2.5, True, None, "007", 10**30]}
    text = yaml.safe_dump(data)
    assert len(text) > FAST_CHARS
    assert parse_document(text, "f") == yaml.safe_load(text) == data
