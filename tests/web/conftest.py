"""One live twin (web view + simulated exporters) and one Chromium per test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.web.harness import ROOT, LiveTwin, fresh_dir, launch

SCREENSHOTS = ROOT / ".artifacts" / "screenshots"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with fresh_dir("twin-chromium-") as profile, sync_playwright() as pw:
        context = launch(pw, profile)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveTwin]:
    twin = LiveTwin(tmp_path_factory.mktemp("web-live")).start()
    try:
        yield twin
    finally:
        assert twin.stop() == 0


def screenshot(page: Any, name: str) -> Path:
    """Save the page as .artifacts/screenshots/NAME.png (git-ignored; the test run makes them)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
