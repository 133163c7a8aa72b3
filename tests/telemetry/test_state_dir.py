"""State-directory faults (issue 15, hole 9): a clear error naming the path, and a corrupted
database moved aside and reported, never silently reset."""

from __future__ import annotations

import pytest

from twin.core.errors import SpecError
from twin.telemetry.store import Store


def test_a_corrupted_database_is_moved_aside_and_a_new_one_opened(tmp_path, caplog):
    db = tmp_path / "state.db"
    db.write_bytes(b"this is not a database" * 100)
    store = Store(db)
    try:
        assert store.moved_aside is not None and store.moved_aside.exists()
        assert store.moved_aside.read_bytes().startswith(b"this is not a database")
        assert "moved aside" in caplog.text
        store.save_job("j", {"model": "x"}, 1)       # the new one works
    finally:
        store.close()


def test_a_truncated_database_is_moved_aside(tmp_path):
    db = tmp_path / "state.db"
    good = Store(db)
    for i in range(200):
        good.save_job(f"job-{i}", {"model": "x" * 500}, i)
    good.close()
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])
    store = Store(db)
    try:
        assert store.moved_aside is not None
    finally:
        store.close()


def test_a_file_where_the_directory_should_be_is_a_named_error(tmp_path):
    blocker = tmp_path / "state"
    blocker.write_text("a file")
    with pytest.raises(SpecError) as err:
        Store(blocker / "telemetry.db")
    assert err.value.field == "state_dir" and str(blocker) in str(err.value)


def test_a_read_only_directory_is_a_named_error(tmp_path, monkeypatch):
    """(As root every directory is writable, so the permission answer is what is replaced.)"""
    import twin.telemetry.store as store_mod

    ro = tmp_path / "ro"
    ro.mkdir()
    monkeypatch.setattr(store_mod.os, "access", lambda path, mode: False)
    with pytest.raises(SpecError) as err:
        Store(ro / "telemetry.db")
    assert err.value.field == "state_dir" and "not writable" in str(err.value) and str(ro) in str(err.value)


def test_twin_serve_with_a_file_as_state_dir_is_a_clear_error(tmp_path):
    import subprocess
    import sys

    blocker = tmp_path / "state"
    blocker.write_text("a file")
    r = subprocess.run([sys.executable, "-m", "twin.cli", "serve", "--state-dir", str(blocker), "--port", "0"],
                       capture_output=True, text=True, timeout=60, check=False,
                       env={"TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2 and "state_dir" in r.stderr and str(blocker) in r.stderr and "Traceback" not in r.stderr
