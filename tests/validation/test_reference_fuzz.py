"""Every field of a training, a collectives and an expert-dispatch case set to each kind of bad
value in turn: ``twin validate`` reports that case skipped, with a short reason, and still
scores the good case beside it; nothing escapes as an exception (bad input is that case's
error, never the file's)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from twin.reference import validate_collectives, validate_training

JUNK = [None, -1, 0, 1.5, float("nan"), float("inf"), 10**400, -(10**5000), "x", "\ud800", [], [1, 2], {},
        {"a": 1}, True, 1e308]
TRAINING = {"id": "ok", "family": "f", "kind": "pretrain",
            "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8,
                        "scale_out": {"fabric": "infiniband", "gbps_per_gpu": 400}},
            "model": {"layers": 2, "hidden": 256, "heads": 4, "vocab": 1000, "seq_len": 512},
            "plan": {"tp": 1, "pp": 1, "dp": 8, "gbs": 8, "mbs": 1},
            "measured": {"step_time_s": 1.0, "tokens_per_s_per_gpu": 100}}
COLLECTIVE = {"id": "ok", "op": "all_reduce",
              "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 16, "gpus_per_node": 8, "nodes": 2,
                          "scale_out": {"fabric": "infiniband", "gbps_per_gpu": 400}},
              "points": [{"bytes": 1e9, "busbw_GBps": 400, "time_us": 100}]}
DISPATCH = {"id": "ok", "op": "ep_dispatch",
            "cluster": {"gpu": "H800-SXM-80GB", "num_gpus": 16, "gpus_per_node": 8,
                        "scale_out": {"fabric": "infiniband", "gbps_per_gpu": 400}},
            "points": [{"busbw_GBps": 43}],
            "workload": {"tokens_per_rank": 128, "hidden": 7168, "top_k": 8, "top_k_groups": 4, "num_experts": 256,
                         "dispatch_dtype": "fp8", "combine_dtype": "bf16", "kernel": "normal"}}


def _paths(d: dict[str, Any], prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    for k, v in d.items():
        yield (*prefix, k)
        if isinstance(v, dict):
            yield from _paths(v, (*prefix, k))
        if isinstance(v, list) and v and isinstance(v[0], dict):
            yield from _paths(v[0], (*prefix, k, 0))


@pytest.mark.parametrize(("good", "validate"), [(TRAINING, validate_training), (COLLECTIVE, validate_collectives),
                                                (DISPATCH, validate_collectives)], ids=["training", "collective",
                                                                                        "dispatch"])
def test_every_field_set_to_junk_is_that_cases_error(engine, good, validate):
    assert [c.id for c in validate(engine, {"cases": [good]}).cases] == ["ok"]
    tried = 0
    for path in _paths(good):
        if path == ("id",):
            continue
        for junk in JUNK:
            case = copy.deepcopy(good)
            case["id"] = "bad"
            cur: Any = case
            for key in path[:-1]:
                cur = cur[key]
            cur[path[-1]] = junk
            report = validate(engine, {"cases": [case, good]})
            assert "ok" in [c.id for c in report.cases], (path, junk)
            assert all(len(s["reason"]) < 600 for s in report.skipped), (path, junk)
            tried += 1
    assert tried > 200
    for junk in JUNK:  # the case's own id: shown cut short, never printed whole
        report = validate(engine, {"cases": [{**copy.deepcopy(good), "id": junk}, good]})
        assert [c.id for c in report.cases][-1] == "ok"
        assert all(len(c.id) < 100 for c in report.cases)
