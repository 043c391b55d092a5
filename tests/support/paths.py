"""Where the tests find the repository and their data, wherever the test file sits."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository root
DATA = ROOT / "tests" / "data"
SUPPORT = ROOT / "tests" / "support"
SCENARIOS = ROOT / "scenarios"
