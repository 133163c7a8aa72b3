"""A loaded rows file kept as columns answers the page exactly as a dict per row did (issue 39,
item 2), and the sweeps kept together are bounded in bytes."""

from __future__ import annotations

import math
import random
import threading
from pathlib import Path

import numpy as np
import pytest

from twin.core.errors import TooLargeError
from twin.sweep.output import read_rows
from twin.web.loaded_rows import LoadedRows
from twin.web.sweep_pages import SORTABLE, SweepJob, WebSweeps
from twin.web.views import STEP_PARTS, rows_from_columns

ROOT = Path(__file__).resolve().parents[2]
AXES = ("plan.tp", "cluster.scale_out.fabric", "plan.recompute")


def _random_columns(rng: random.Random, n: int) -> dict[str, np.ndarray]:
    """Columns as read_rows makes them, with the awkward values: NaN, None, strings in number
    columns, booleans, ties, missing parts."""
    def maybe(values: list) -> list:
        return [None if rng.random() < 0.1 else v for v in values]

    cols = {
        "point_id": np.arange(n, dtype=np.int64),
        "plan.tp": np.asarray([rng.choice([1, 2, 4, 8]) for _ in range(n)], dtype=np.int64),
        "cluster.scale_out.fabric": np.asarray([rng.choice(["ib", "roce", None]) for _ in range(n)], dtype=object),
        "plan.recompute": np.asarray([rng.random() < 0.5 for _ in range(n)], dtype=bool),
        "feasible": np.asarray(maybe([rng.random() < 0.7 for _ in range(n)]), dtype=object),
        "num_gpus": np.asarray([rng.choice([64, 128]) for _ in range(n)], dtype=np.int64),
        "step_time_s": np.asarray([rng.choice([math.nan, 1.0, 2.0, rng.random()]) for _ in range(n)]),
        "tokens_per_s": np.asarray(maybe([rng.choice([1e5, 2e5, rng.random() * 1e6]) for _ in range(n)]),
                                   dtype=object),
        "power_kw": np.asarray([rng.choice([math.nan, 10.0, rng.random() * 100]) for _ in range(n)]),
        "mfu": np.asarray(maybe([rng.random() for _ in range(n)] if rng.random() < 0.5 else
                                [rng.choice([0.3, "n/a"]) for _ in range(n)]), dtype=object),
        "reason": np.asarray([rng.choice(["", "does not fit"]) for _ in range(n)], dtype=object),
    }
    for key, _ in STEP_PARTS[: rng.randrange(len(STEP_PARTS))]:
        cols[key] = np.asarray([rng.random() for _ in range(n)])
    return cols


def _both(columns: dict[str, np.ndarray], axes: tuple[str, ...]) -> tuple[SweepJob, SweepJob]:
    as_dicts = SweepJob(id="a", name="a", source="file", axes=axes, state="loaded")
    as_dicts.rows = rows_from_columns(columns, axes)
    as_columns = SweepJob(id="b", name="b", source="file", axes=axes, state="loaded",
                          loaded=LoadedRows(columns, axes))
    return as_dicts, as_columns


def _same(a: SweepJob, b: SweepJob, metric: str) -> None:
    a.metric = b.metric = metric
    for sort in (*SORTABLE, *(f"axis:{x}" for x in AXES), "axis:nope"):
        for order in ("asc", "desc"):
            got, want = b.table(sort, order, 40), a.table(sort, order, 40)
            for d in (got, want):
                d.pop("id"), d.pop("name")
            assert got == want, (sort, order)


@pytest.mark.parametrize("seed", range(12))
def test_columns_answer_the_table_and_plots_as_dict_rows(seed):
    rng = random.Random(seed)
    a, b = _both(_random_columns(rng, rng.choice([0, 1, 7, 60])), AXES)
    _same(a, b, rng.choice(["step_time_s", "tokens_per_s", "mfu", "power_kw"]))


def test_a_real_rows_file_answers_alike(tmp_path):
    from twin.sweep.output import write_rows

    rng = random.Random(3)
    path = tmp_path / "rows.parquet"
    cols = _random_columns(rng, 300)
    cols["feasible"] = np.asarray([bool(v) for v in cols["feasible"]])
    cols["tokens_per_s"] = np.asarray([float(v) if v is not None else math.nan for v in cols["tokens_per_s"]])
    cols["mfu"] = np.asarray([rng.random() for _ in range(300)])
    write_rows(cols, path)
    columns = read_rows(path)
    axes = tuple(c for c in columns if c.startswith(("plan.", "cluster.")))
    _same(*_both(columns, axes), "tokens_per_s")


def _rows_file(rows: int) -> bytes:
    return ("point_id,feasible,step_time_s,reason\n" + "".join(f"{i},True,{i * 0.5},{'x' * 40}\n"
                                                                 for i in range(rows))).encode()


def test_the_sweeps_kept_are_bounded_in_bytes_oldest_first():
    one = LoadedRows(read_rows_bytes(_rows_file(2000)), ()).nbytes
    sweeps = WebSweeps(None, 4, threading.Event(), max_rows=10_000, max_kept_bytes=int(2.5 * one))
    ids = [sweeps.load(f"f{i}.csv", _rows_file(2000), read_rows).id for i in range(4)]
    kept = [j["id"] for j in sweeps.listing()]
    assert kept == ids[:1:-1]  # the newest two: a third would pass the bound
    with pytest.raises(TooLargeError) as err:  # one file larger than the bound by itself
        sweeps.load("big.csv", _rows_file(6000), read_rows)
    assert err.value.field == "file" and "together" in str(err.value)
    assert [j["id"] for j in sweeps.listing()] == kept


def read_rows_bytes(data: bytes) -> dict[str, np.ndarray]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.csv"
        path.write_bytes(data)
        return read_rows(path)
