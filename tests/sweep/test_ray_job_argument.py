"""How the Ray executor ships a job to its batch tasks: a small job inside each task, a big one
(or one the standard pickle refuses) by one object-store reference."""

from __future__ import annotations

from twin.sweep.job import Job
from twin.sweep.ray_exec import INLINE_JOB_BYTES, _job_argument


class RecordingRay:
    """Stands in for the ``ray`` module: ``put`` returns a marker and records what was put."""

    def __init__(self) -> None:
        self.put_calls: list[object] = []

    def put(self, value: object) -> str:
        self.put_calls.append(value)
        return "ref"


def test_a_small_job_goes_inside_each_task():
    ray = RecordingRay()
    job = Job(recipe={"axes": [1, 2, 3]}, total=3)
    assert _job_argument(ray, job) is job
    assert ray.put_calls == []


def test_a_job_above_rays_inline_limit_is_put_once():
    ray = RecordingRay()
    job = Job(recipe=b"x" * INLINE_JOB_BYTES, total=1)
    assert _job_argument(ray, job) == "ref"
    assert ray.put_calls == [job]


def test_a_job_the_standard_pickle_refuses_is_put():
    ray = RecordingRay()
    job = Job(recipe=lambda: None, total=1)  # cloudpickle (Ray) ships it; pickle cannot size it
    assert _job_argument(ray, job) == "ref"
    assert ray.put_calls == [job]
