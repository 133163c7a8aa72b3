"""The set-up script installs once and then starts in no time: it re-installs only when a
file the install depends on changed (no package registry on a second start). It never installs
the example plugin into .venv (the serving environment) and removes one an older setup left."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _project(tmp: Path) -> Path:
    """A copy of the script in a project whose .venv python only records what it is asked."""
    (tmp / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp / "scripts" / "setup.sh")
    (tmp / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp / "proto").mkdir()
    (tmp / "proto" / "a.proto").write_text('syntax = "proto3";\n')
    (tmp / "tests" / "example_plugin").mkdir(parents=True)
    (tmp / "tests" / "example_plugin" / "pyproject.toml").write_text("[project]\nname = 'twin-example-dragonfly'\n")
    bin_dir = tmp / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in (("python", f'#!/bin/sh\necho "$@" >> "{tmp}/calls.log"\n'), ("twin", "#!/bin/sh\n")):
        path = bin_dir / name
        path.write_text(body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return tmp


def _run(project: Path) -> list[str]:
    log = project / "calls.log"
    before = log.read_text().splitlines() if log.exists() else []
    subprocess.run(["bash", str(project / "scripts" / "setup.sh")], check=True, timeout=60,
                   env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    after = log.read_text().splitlines() if log.exists() else []
    return after[len(before):]


def test_installs_once_then_only_when_an_input_changes(tmp_path):
    project = _project(tmp_path)
    first = _run(project)
    assert any("pip install" in c and "-e" in c for c in first)  # the first start installs
    assert _run(project) == []  # the second does not touch pip (no registry)
    (project / "proto" / "a.proto").write_text('syntax = "proto3";\n// changed\n')
    assert any("pip install" in c for c in _run(project))  # a changed input re-installs
    assert _run(project) == []
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\nversion = '2'\n")
    assert any("pip install" in c for c in _run(project))


def test_the_example_plugin_is_not_installed_and_editing_it_reinstalls_nothing(tmp_path):
    project = _project(tmp_path)
    first = _run(project)
    assert first and not [c for c in first if "example" in c or "dragonfly" in c]
    (project / "tests" / "example_plugin" / "pyproject.toml").write_text("[project]\nname = 'changed'\n")
    assert _run(project) == []  # the example plugin is no input of the serving environment


def test_an_example_plugin_an_older_setup_installed_is_uninstalled(tmp_path):
    project = _project(tmp_path)
    _run(project)  # installed and stamped: the next start would touch nothing
    dist = project / ".venv" / "lib" / "python3.11" / "site-packages" / "twin_example_dragonfly-0.1.0.dist-info"
    dist.mkdir(parents=True)
    assert _run(project) == ["-m pip uninstall -q -y twin-example-dragonfly"]  # no reinstall, no registry
    dist.rmdir()  # what pip uninstall does
    assert _run(project) == []
