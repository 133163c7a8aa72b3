"""Fixtures for failure-scenario tests: one analyzer with the built-in plugins only."""

from __future__ import annotations

import pytest

from twin.failure_analyzer import FailureAnalyzer


@pytest.fixture(scope="session")
def fa(engine) -> FailureAnalyzer:
    return FailureAnalyzer(engine)


# 8 nodes x 4 GPUs, one NIC per GPU, plain fat tree of radix-8 switches: each leaf has
# 4 NIC ports down and 4 uplinks (non-blocking), one to each of the 4 spines.
SMALL_FAT_TREE = {
    "name": "small-fat-tree",
    "cluster": {"system": "DGX-H100", "num_gpus": 32, "gpus_per_node": 4, "scale_up": {"domain_gpus": 4},
                "scale_out": {"nics_per_node": 4, "topology": "fat_tree", "switch_radix": 8}},
    "model": "llama3.1-8b",
    "plan": {"tp": 4, "gbs": 64, "mbs": 1},
}


def with_failures(scenario: dict, **failures) -> dict:
    return {**scenario, "failures": failures}
