"""Write and read sweep rows: Parquet (pyarrow, optional), CSV or JSON lines, by file suffix."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from twin.core.errors import SpecError, TooLargeError
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


def read_rows(path: str | Path, max_rows: int | None = None) -> Rows:
    """Read rows written by :func:`write_rows`; at most ``max_rows`` of them (None: any number),
    counted before anything is expanded: a Parquet file's row count from its metadata (a few KB of
    zstd can hold 10^7 rows), CSV and JSON lines as they are read (TooLargeError past it).
    """
    p = Path(path)
    fmt = _format(p)
    if not p.is_file():
        raise SpecError(str(path), "cannot read file: no such file")
    try:
        if fmt == ".parquet":
            return _parquet_columns(p, max_rows)
        records = _csv_records(p, max_rows) if fmt == ".csv" else _jsonl_records(p, max_rows)
        keys: list[str] = list(records[0]) if records else []
        return {k: _column([r.get(k) for r in records], k) for k in keys}
    except SpecError:
        raise
    except UnicodeDecodeError as err:
        raise SpecError(str(path), f"is not UTF-8 text (byte {err.start}): not a rows file of twin sweep "
                                   "--out") from err
    except (ValueError, TypeError, OSError, csv.Error) as err:  # pyarrow's errors are ValueError / OSError
        raise SpecError(str(path), f"is not a {fmt} rows file twin sweep --out writes: "
                                   f"{type(err).__name__}: {str(err)[:200]}") from err


def _too_many(p: Path, max_rows: int, rows: int | None = None) -> TooLargeError:
    held = f"has {rows:,} rows" if rows is not None else f"has more than {max_rows:,} rows"
    return TooLargeError(str(p), f"{held}; at most {max_rows:,} are read (limits.max_sweep_points)")


def _parquet_columns(p: Path, max_rows: int | None) -> Rows:
    """A Parquet rows file's columns, its size checked from its metadata before any is read; each
    column converted as a whole (no Python object per number), as :func:`_column` would make it.
    """
    pa = _pyarrow(p, "reading")
    meta = pa.parquet.ParquetFile(p).metadata
    if max_rows is not None and meta.num_rows > max_rows:
        raise _too_many(p, max_rows, meta.num_rows)
    table = pa.parquet.read_table(p)
    out = {}
    for name in table.column_names:
        column = table.column(name)
        kind = column.type
        if column.null_count == 0 and (pa.types.is_integer(kind) or pa.types.is_floating(kind)
                                       or pa.types.is_boolean(kind)) and len(column):
            array = column.to_numpy()
            out[name] = array.astype(bool if pa.types.is_boolean(kind) else
                                     np.int64 if pa.types.is_integer(kind) else np.float64, copy=False)
        else:
            out[name] = _column(column.to_pylist(), name)
    return out


def _csv_records(p: Path, max_rows: int | None = None) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    with p.open(encoding="utf-8", newline="") as f:
        for line_no, rec in enumerate(csv.DictReader(f), 2):
            if max_rows is not None and len(records) >= max_rows:
                raise _too_many(p, max_rows)
            if None in rec:  # more fields than the header names
                raise SpecError(f"{p}:{line_no}", "has more fields than the header")
            records.append({k: _parse(v) for k, v in rec.items()})
    return records


def _jsonl_records(p: Path, max_rows: int | None = None) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    with p.open(encoding="utf-8", newline="") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            if max_rows is not None and len(records) >= max_rows:
                raise _too_many(p, max_rows)
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


INT64 = (-(2**63), 2**63 - 1)  # what a rows file's integer columns hold (int64, as write_rows writes them)


def _column(values: list[Any], name: str = "") -> np.ndarray:
    if values and all(isinstance(v, bool) for v in values):
        return np.asarray(values, dtype=bool)
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        wide = next((v for v in values if not INT64[0] <= v <= INT64[1]), None)
        if wide is not None:
            raise SpecError(f"column {name!r}", f"holds the integer {str(wide)[:40]}, beyond 64 bits: not a value "
                                                "twin sweep --out writes")
        return np.asarray(values, dtype=np.int64)
    if values and all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in values):
        return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    return np.asarray(values, dtype=object)
