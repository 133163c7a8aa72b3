"""Mapping -> Scenario equivalence against an earlier revision of the code.

    python validation/parse_equivalence.py [--against REV] [--points 10000]

Runs ``Engine.scenario(mapping)`` on the random points of ``validation/equivalence.py``
twice with the current code (cold caches, then warm: the second pass goes through every
cache) and once with the code of git revision ``REV`` (default: the commit before
issue 9's parser work), in a child process that imports that revision's ``twin`` and
``twin_plugins`` from a temporary export (``git archive``). Per point it compares the
scenario's plain form (``schema.dump``: every field, nested) with ``==`` and by ``repr``
(which also catches ``1`` vs ``1.0`` and a changed dict order), or the error: class,
field and message. Prints the counts; exits 1 if anything differs.
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The last commit of main before the issue-9 parser changes (scenario_io/schema/catalog).
BASELINE_REV = "937ecbe"


def records(pts: list[dict[str, Any]], passes: int = 1) -> list[list[tuple[Any, ...]]]:
    """Per pass over ``pts`` (one engine, so later passes hit every cache), per point:
    ("ok", plain form, repr of it) or ("error", class, field, message)."""
    from twin.core import schema
    from twin.core.errors import TwinError
    from twin.engine import Engine

    engine = Engine(autoload=False)
    out: list[list[tuple[Any, ...]]] = []
    for _ in range(passes):
        rows: list[tuple[Any, ...]] = []
        for p in pts:
            try:
                plain = schema.dump(engine.scenario(p))
                rows.append(("ok", plain, repr(plain)))
            except TwinError as err:
                rows.append(("error", type(err).__name__, getattr(err, "field", None), str(err)))
        out.append(rows)
    return out


def _points(n: int) -> list[dict[str, Any]]:
    sys.path.insert(0, str(ROOT / "validation"))
    from equivalence import points

    return points(n)


def old_records(rev: str, n: int) -> list[tuple[Any, ...]]:
    """The records of revision ``rev``, computed in a child process on its own code."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "twin", "plugins"], check=True,
                             capture_output=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        (Path(tmp) / "plugins").rename(Path(tmp) / "twin_plugins")
        out = Path(tmp) / "records.pkl"
        env = {**os.environ, "PYTHONPATH": tmp, "TWIN_DISABLE_PLUGIN_AUTOLOAD": "1"}
        subprocess.run([sys.executable, __file__, "--child", str(out), "--points", str(n), "--expect-root", tmp],
                       check=True, env=env, cwd=tmp)
        return pickle.loads(out.read_bytes())[0]


def compare(old: list[tuple[Any, ...]], new: list[tuple[Any, ...]], label: str) -> int:
    """Print how many records match; return the number that differ."""
    bad = [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b]
    oks = sum(1 for r in old if r[0] == "ok")
    print(f"{label}: {len(old) - len(bad):,} of {len(old):,} identical ({oks:,} scenarios, "
          f"{len(old) - oks:,} errors), {len(bad)} different")
    for i in bad[:5]:
        print(f"    point {i}:\n      old {old[i]!r:.400}\n      new {new[i]!r:.400}")
    return len(bad)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default=BASELINE_REV, help="git revision of the old code")
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--expect-root", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    pts = _points(args.points)
    if args.child:
        import twin

        # The child must run the exported revision, not the working tree.
        assert Path(twin.__file__).resolve().is_relative_to(Path(args.expect_root).resolve()), twin.__file__
        Path(args.child).write_bytes(pickle.dumps(records(pts)))
        return 0
    old = old_records(args.against, args.points)
    cold, warm = records(pts, passes=2)
    bad = compare(old, cold, f"{args.against} vs current, cold caches")
    bad += compare(old, warm, f"{args.against} vs current, warm caches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
