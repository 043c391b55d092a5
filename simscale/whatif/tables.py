"""Rows to files (CSV, JSON, parquet) and to a pandas DataFrame.

CSV and JSON need nothing beyond the standard library; parquet and DataFrames need pandas (and
pyarrow for parquet), optional dependencies named in the error when missing.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simscale.report.outputs import check_writable
from simscale.whatif.errors import WhatIfError

FORMATS = (".csv", ".json", ".parquet")


def check_output(path: Path, force: bool = False) -> None:
    """One-line errors for an unknown suffix, an existing file not to be overwritten, or a path
    that cannot be written."""
    if path.suffix not in FORMATS:
        raise WhatIfError(f"{path}: unknown format {path.suffix!r}, expected {', '.join(FORMATS)}")
    if path.suffix == ".parquet":
        _pandas("writing parquet")
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise WhatIfError(
                f"{path}: writing parquet needs pyarrow (pip install 'simscale[dataframe]')"
            ) from None
    if path.exists() and not force:
        raise WhatIfError(f"{path}: exists; pass --force to overwrite it")
    check_writable(path, "-o")


def write_rows(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """Write atomically (temporary file, then rename) in the format the suffix names."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    if path.suffix == ".csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({c: "" if r.get(c) is None else r.get(c) for c in columns})
        tmp.write_text(buf.getvalue(), encoding="utf-8")
    elif path.suffix == ".json":
        clean = [{c: _finite(r.get(c)) for c in columns} for r in rows]
        tmp.write_text(json.dumps(clean, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    elif path.suffix == ".parquet":
        to_frame(rows, columns).to_parquet(tmp, index=False)
    else:
        raise WhatIfError(f"{path}: unknown format {path.suffix!r}")
    os.replace(tmp, path)


def _finite(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _pandas(why: str) -> Any:
    try:
        import pandas
    except ImportError:
        raise WhatIfError(f"{why} needs pandas (pip install 'simscale[dataframe]')") from None
    return pandas


def to_frame(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> Any:
    """A pandas DataFrame of the rows, columns in sweep order."""
    pd = _pandas("a DataFrame")
    frame = pd.DataFrame(list(rows))
    if columns is not None:
        frame = frame.reindex(columns=list(columns))
    return frame


def format_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A terminal table: the point's columns, then the headline metrics or the reason."""
    head = [c for c in columns if c not in _METRICS_SHOWN and c in _first_block(columns)]
    shown = [*head, "num_gpus", "throughput", "efficiency", "iter ms", "$/h", "bottleneck"]
    table = [shown]
    for r in rows:
        line = [_fmt(r.get(c)) for c in head]
        if r["status"] != "ok":
            line += ["", "", "", "", "", f"{r['status'].upper()}: {r['message']}"]
        else:
            line += [
                str(r["num_gpus"]),
                f"{r['throughput_samples_per_s']:,.0f}",
                f"{r['scaling_efficiency']:.1%}",
                f"{r['iteration_time_s'] * 1e3:,.1f}",
                "" if r["usd_per_hour"] is None else f"{r['usd_per_hour']:,.2f}",
                _short(r["bottleneck"]),
            ]
        table.append(line)
    widths = [max(len(row[i]) for row in table) for i in range(len(shown) - 1)]
    out = []
    for row in table:
        cells = [c.rjust(w) for c, w in zip(row[:-1], widths, strict=True)]
        out.append("  ".join([*cells, row[-1]]))
    return "\n".join(out)


_METRICS_SHOWN = {"point"}


def _first_block(columns: Sequence[str]) -> list[str]:
    out = []
    for c in columns:
        if c == "status":
            break
        out.append(c)
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return "" if v is None else str(v)


def _short(text: str, n: int = 70) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."
