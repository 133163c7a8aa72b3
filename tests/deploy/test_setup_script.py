"""The set-up script installs once and then starts in no time: it re-installs only when a
file the install depends on changed (no package registry on a second start). It never installs
the example plugin and removes one an older setup left. The serving environment (``serve``,
scripts/run.sh) gets the server, telemetry and web extras only and never runs apt, even as root;
the test environment (``test``, scripts/test.sh) gets every extra, the test tools and the browser."""

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
    for venv in (".venv", ".venv-serve"):
        bin_dir = tmp / venv / "bin"
        bin_dir.mkdir(parents=True)
        for name, body in (("python", f'#!/bin/sh\necho "$@" >> "{tmp}/calls.log"\n'), ("twin", "#!/bin/sh\n")):
            _script(bin_dir / name, body)
    # apt-get on the PATH only records that it was asked (and a browser that is missing).
    _script(tmp / "fakebin" / "apt-get", f'#!/bin/sh\necho "$@" >> "{tmp}/apt.log"\n')
    return tmp


def _script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run(project: Path, *mode: str) -> list[str]:
    log = project / "calls.log"
    before = log.read_text().splitlines() if log.exists() else []
    subprocess.run(["bash", str(project / "scripts" / "setup.sh"), *mode], check=True, timeout=60,
                   env={"PATH": f"{project / 'fakebin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                        "TWIN_CHROMIUM": str(project / "no-chromium")})
    after = log.read_text().splitlines() if log.exists() else []
    return after[len(before):]


def test_the_serving_environment_has_the_serving_extras_and_never_runs_apt(tmp_path):
    project = _project(tmp_path)
    calls = _run(project, "serve")
    (install,) = [c for c in calls if "pip install" in c and "-e" in c]
    assert install.endswith(".[server,telemetry,web]"), install  # no test tools, no ray, plot, parquet
    assert not (project / "apt.log").exists()  # however privileged the user: no apt, no browser
    assert (project / ".venv-serve" / ".fabric-twin-setup").exists()
    assert not (project / ".venv" / ".fabric-twin-setup").exists()  # the test environment untouched
    assert _run(project, "serve") == []


def test_the_test_environment_has_every_extra_and_the_test_tools(tmp_path):
    project = _project(tmp_path)
    (install,) = [c for c in _run(project, "test") if "pip install" in c and "-e" in c]
    assert "test" in install and "web" in install and "ray" in install
    if os.getuid() == 0:  # root installs the missing browser (as CI runs); best effort
        assert "install -y -qq chromium" in (project / "apt.log").read_text()
    assert _run(project) == []  # no argument: the test environment, as scripts/test.sh asks


def test_an_unknown_mode_is_refused(tmp_path):
    project = _project(tmp_path)
    out = subprocess.run(["bash", str(project / "scripts" / "setup.sh"), "prod"], capture_output=True, text=True,
                         check=False,
                         timeout=60)
    assert out.returncode == 2 and "unknown mode 'prod'" in out.stderr


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
