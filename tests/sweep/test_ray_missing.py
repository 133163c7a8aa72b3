"""Without Ray installed, the Ray executor is a precondition failure naming the extra."""

from __future__ import annotations

import pytest


def test_missing_ray_is_a_failed_precondition_naming_the_extra(monkeypatch):
    import sys

    import grpc

    from twin.core.errors import InfeasibleError
    from twin.sweep.ray_exec import import_ray
    from twin.wire.status_table import code_for

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(InfeasibleError) as err:
        import_ray()
    assert "'ray' extra" in err.value.reason and err.value.field == "executor"
    assert code_for(err.value) == grpc.StatusCode.FAILED_PRECONDITION
