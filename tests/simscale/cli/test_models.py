"""``simscale models``: one aligned line per model of the zoo."""

from __future__ import annotations

import re

import pytest

from simscale import zoo
from simscale.cli import main


def test_every_row_lines_up_with_the_header(capsys: pytest.CaptureFixture[str]) -> None:
    """Each column ends where its heading ends, on every row (inception_v3_noaux, the longest
    name, once pushed its row two characters right)."""
    assert main(["models"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()[:-1]  # the last line is a note
    assert len(rows) == len(zoo.names())
    columns = [header.index(h) + len(h) for h in ("arrays", "parameters", "fp32", "sample")]
    for row in rows:
        assert len(row) == len(header), row
        ends = [m.end() for m in re.finditer(r"\S+", row)]
        assert ends[-4:] == columns, row  # the numbers are right-aligned under their headings
