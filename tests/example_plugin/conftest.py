"""Not part of the example package: the twin suite's hook that installs it for its own tests
(the ``example_plugin`` fixture of tests/conftest.py: a temporary directory, never .venv)."""

import pytest


@pytest.fixture(autouse=True)
def _installed(example_plugin):
    return example_plugin
