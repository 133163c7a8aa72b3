"""Write and read sweep rows: Parquet (pyarrow, optional), CSV or JSON lines, by file suffix."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from twin.core.errors import SpecError
from twin.core.extras import needs_extra
from twin.sweep.metrics import as_python
from twin.sweep.reduce import Rows, nrows

FORMATS = (".parquet", ".csv", ".jsonl")


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise SpecError("out", f"must end in one of {', '.join(FORMATS)} (got {path.name!r})")
    return suffix


def _pyarrow(path: Path, what: str) -> Any:
    # .csv and .jsonl need nothing beyond the base install; the error says so.
    with needs_extra("parquet", f"{what} Parquet", field=str(path), alternative="or use .csv or .jsonl"):
        import pyarrow
        import pyarrow.parquet
    return pyarrow


def _cell(x: Any) -> Any:
    x = as_python(x)
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_rows(rows: Rows, path: str | Path) -> int:
    """Write columnar rows; returns the row count."""
    p = Path(path)
    fmt = _format(p)
    n = nrows(rows)
    if fmt == ".parquet":
        pa = _pyarrow(p, "writing")
        cols = {}
        for k, v in rows.items():
            if v.dtype == object:
                cols[k] = pa.array([_cell(x) for x in v])
            else:
                cols[k] = pa.array(v)
        pa.parquet.write_table(pa.table(cols), p)
        return n
    keys = list(rows)
    with p.open("w", encoding="utf-8", newline="") as f:
        if fmt == ".csv":
            w = csv.writer(f)
            w.writerow(keys)
            for i in range(n):
                w.writerow(["" if (c := _cell(rows[k][i])) is None else c for k in keys])
        else:
            for i in range(n):
                f.write(json.dumps({k: _cell(rows[k][i]) for k in keys}) + "\n")
    return n


def read_rows(path: str | Path) -> Rows:
    """Read rows written by :func:`write_rows`."""
    p = Path(path)
    fmt = _format(p)
    if not p.is_file():
        raise SpecError(str(path), "cannot read file: no such file")
    try:
        if fmt == ".parquet":
            pa = _pyarrow(p, "reading")
            table = pa.parquet.read_table(p)
            return {name: _column(table.column(name).to_pylist()) for name in table.column_names}
        records = _csv_records(p) if fmt == ".csv" else _jsonl_records(p)
        keys: list[str] = list(records[0]) if records else []
        return {k: _column([r.get(k) for r in records]) for k in keys}
    except SpecError:
        raise
    except UnicodeDecodeError as err:
        raise SpecError(str(path), f"is not UTF-8 text (byte {err.start}): not a rows file of twin sweep "
                                   "--out") from err
    except (ValueError, TypeError, OSError, csv.Error) as err:  # pyarrow's errors are ValueError / OSError
        raise SpecError(str(path), f"is not a {fmt} rows file twin sweep --out writes: "
                                   f"{type(err).__name__}: {str(err)[:200]}") from err


def _csv_records(p: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    with p.open(encoding="utf-8", newline="") as f:
        for line_no, rec in enumerate(csv.DictReader(f), 2):
            if None in rec:  # more fields than the header names
                raise SpecError(f"{p}:{line_no}", "has more fields than the header")
            records.append({k: _parse(v) for k, v in rec.items()})
    return records


def _jsonl_records(p: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    with p.open(encoding="utf-8", newline="") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as err:
                raise SpecError(f"{p}:{line_no}", f"is not valid JSON: {err}") from err
            if not isinstance(rec, dict):
                raise SpecError(f"{p}:{line_no}", f"must be a JSON object, one row (got {type(rec).__name__})")
            records.append(rec)
    return records


def _parse(v: str) -> Any:
    if v == "":
        return None
    if v in ("True", "False"):
        return v == "True"
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            continue
    return v


def _column(values: list[Any]) -> np.ndarray:
    if values and all(isinstance(v, bool) for v in values):
        return np.asarray(values, dtype=bool)
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return np.asarray(values, dtype=np.int64)
    if values and all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in values):
        return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    return np.asarray(values, dtype=object)
