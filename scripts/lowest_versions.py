#!/usr/bin/env python3
"""Lowest-versions check: install every dependency at its declared lower bound and run the tests.

    python scripts/lowest_versions.py                       # the whole suite (the default)
    python scripts/lowest_versions.py tests/core -x         # arguments after the options go to pytest
    python scripts/lowest_versions.py --venv .venv-lowest --keep

Reads pyproject.toml: the base dependencies, the extras the tests use (``--extras``), and the
build requirements. Each requirement must name its floor (``>=X``, ``~=X`` or ``==X``); the
check turns every floor into an exact pin (``name==X``), writes them to a constraints file and
installs the project from this checkout into a fresh virtual environment with
``pip install -c`` (runtime) and ``--build-constraint`` (the build's setuptools and
grpcio-tools), then checks that each pinned distribution is installed at exactly its floor,
runs ``pip check`` and the test suite. Dependencies of dependencies are left to the resolver.

A declared floor that cannot be installed with the others, or with which a test fails, is
false: raise it to the lowest version that passes and say why next to it in pyproject.toml.
Needs only Python >= 3.11 (tomllib) and the package registry; exits with pytest's status.
Use the lowest Python the project supports (``requires-python``) for the truest answer.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The extras the test suite imports (scripts/setup.sh installs the same); bench is a benchmark only.
TEST_EXTRAS = "server,telemetry,ray,parquet,plot,web,traces,test"
PROJECT = "fabric-twin"
# PEP 508 name, optional [extras], then the version specifiers up to a marker or comment.
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;#]*)")
FLOOR = re.compile(r"(>=|~=|==)\s*([0-9][A-Za-z0-9.+!-]*)")


def canonical(name: str) -> str:
    """PEP 503 normalised name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def floor_pin(requirement: str) -> tuple[str, str] | None:
    """(name, lowest version) of one requirement; None for the project itself (an extra of it).

    Raises ValueError when the requirement declares no lower bound.
    """
    m = REQUIREMENT.match(requirement)
    if not m:
        raise ValueError(f"cannot read requirement {requirement!r}")
    name, spec = m.group(1), m.group(3)
    if canonical(name) == PROJECT:
        return None
    floors = FLOOR.findall(spec)
    if not floors:
        raise ValueError(f"{requirement!r} declares no lower bound (>=, ~= or ==): the check cannot pin it")
    if len(floors) > 1:
        raise ValueError(f"{requirement!r} declares more than one lower bound")
    return canonical(name), floors[0][1]


def pins(pyproject: dict, extras: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(runtime pins, build pins) from pyproject.toml for the base install plus ``extras``."""
    project = pyproject["project"]
    optional = project.get("optional-dependencies", {})
    unknown = sorted(set(extras) - set(optional))
    if unknown:
        raise ValueError(f"pyproject.toml has no extra {', '.join(unknown)}; it has {', '.join(sorted(optional))}")
    runtime: dict[str, str] = {}
    for req in [*project.get("dependencies", []), *(r for e in extras for r in optional[e])]:
        pin = floor_pin(req)
        if pin is None:
            continue
        name, version = pin
        if runtime.get(name, version) != version:
            raise ValueError(f"{name} has two floors ({runtime[name]} and {version}); declare one")
        runtime[name] = version
    build: dict[str, str] = {}
    for req in pyproject.get("build-system", {}).get("requires", []):
        m = REQUIREMENT.match(req)
        if m and FLOOR.search(m.group(3)):  # an unversioned build tool (wheel) stays unpinned
            pin = floor_pin(req)
            if pin is not None:
                build[pin[0]] = pin[1]
    return runtime, build


def run(cmd: list[str], **kw: object) -> None:
    """Echo and run a command; a failure raises CalledProcessError."""
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def installed_versions(python: Path, names: list[str]) -> dict[str, str | None]:
    """The version of each distribution in the environment of ``python`` (None: not installed)."""
    code = ("import importlib.metadata as m, json, sys\nout = {}\nfor n in sys.argv[1:]:\n"
            "    try:\n        out[n] = m.version(n)\n    except m.PackageNotFoundError:\n        out[n] = None\n"
            "print(json.dumps(out))")
    out = subprocess.run([str(python), "-c", code, *names], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def release(version: str | None) -> tuple[int, ...]:
    """The numeric release of a version, trailing zeros dropped ("1.5" and "1.5.0" are the same release)."""
    nums = [int(x) for x in re.findall(r"\d+", (version or "").split("+")[0].split("rc")[0])[:4]]
    while nums and nums[-1] == 0:
        nums.pop()
    return tuple(nums)


def main(argv: list[str] | None = None) -> int:
    """Create the environment, install at the floors, run pytest; pytest's exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venv", type=Path, help="where to create the environment (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the environment afterwards")
    parser.add_argument("--extras", default=TEST_EXTRAS, help=f"extras to install (default {TEST_EXTRAS})")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the environment (default: this)")
    args, pytest_args = parser.parse_known_args(argv)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = [e for e in args.extras.split(",") if e]
    try:
        runtime, build = pins(pyproject, extras)
    except ValueError as err:
        print(f"lowest_versions: pyproject.toml: {err}", file=sys.stderr)
        return 2
    venv = args.venv or Path(tempfile.mkdtemp(prefix="twin-lowest-"))
    if venv.exists() and any(venv.iterdir()):
        print(f"lowest_versions: {venv} exists and is not empty; pass a new --venv", file=sys.stderr)
        return 2
    try:
        run([args.python, "-m", "venv", str(venv)])
        python = venv / "bin" / "python"
        constraints, build_constraints = venv / "lowest-constraints.txt", venv / "lowest-build-constraints.txt"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(runtime.items())))
        build_constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(build.items())))
        print("pins:", ", ".join(f"{n}=={v}" for n, v in sorted(runtime.items())))
        print("build pins:", ", ".join(f"{n}=={v}" for n, v in sorted(build.items())))
        # pip itself is not a dependency of the project; a current one knows --build-constraint.
        run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"])
        spec = f".[{','.join(extras)}]" if extras else "."
        run([str(python), "-m", "pip", "install", "-q", "-c", str(constraints), "--build-constraint",
             str(build_constraints), "-e", spec], cwd=ROOT)
        # Not the example plugin: the tests that need it install it themselves (tests/conftest.py).
        got = installed_versions(python, sorted(runtime))
        wrong = {n: (v, got[n]) for n, v in runtime.items() if release(got[n]) != release(v)}
        if wrong:
            listed = ", ".join(f"{n} {have} (want {want})" for n, (want, have) in sorted(wrong.items()))
            print(f"lowest_versions: not installed at the floor: {listed}", file=sys.stderr)
            return 1
        version = subprocess.run([str(python), "-V"], check=True, capture_output=True, text=True).stdout.strip()
        print(f"every pinned distribution is at its floor ({len(runtime)}); {version}")
        run([str(python), "-m", "pip", "check"])
        cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args]
        print("+", " ".join(cmd), flush=True)
        return subprocess.run(cmd, cwd=ROOT, check=False).returncode
    except subprocess.CalledProcessError as err:
        print(f"lowest_versions: {' '.join(err.cmd)} failed ({err.returncode})", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(venv, ignore_errors=True)
        else:
            print(f"kept {venv}")


if __name__ == "__main__":
    sys.exit(main())
