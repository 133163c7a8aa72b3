"""Starting a local Ray: one start-up that times out is retried; two give a clear TwinError."""

from __future__ import annotations

import pytest

from twin.core.errors import TwinError
from twin.sweep.ray_exec import LOCAL_START_ATTEMPTS, _start_local_ray


class FlakyRay:
    """Records init/shutdown calls; ``init`` fails the first ``failures`` times like Ray's timeout."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[str] = []

    def init(self, **kwargs: object) -> None:
        self.calls.append(f"init num_cpus={kwargs['num_cpus']}")
        if self.failures:
            self.failures -= 1
            raise Exception("The current node timed out during startup.")

    def shutdown(self) -> None:
        self.calls.append("shutdown")


def test_a_timed_out_start_is_cleaned_up_and_retried():
    ray = FlakyRay(failures=1)
    _start_local_ray(ray, 2)
    assert ray.calls == ["init num_cpus=2", "shutdown", "init num_cpus=2"]


def test_a_start_that_keeps_failing_is_a_twin_error():
    ray = FlakyRay(failures=LOCAL_START_ATTEMPTS)
    with pytest.raises(TwinError, match=r"could not start a local Ray cluster \(2 attempts\): .*timed out"):
        _start_local_ray(ray, None)
    assert ray.calls.count("shutdown") == LOCAL_START_ATTEMPTS
