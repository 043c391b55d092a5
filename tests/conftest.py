"""Fixtures every test folder may use; helpers that are not fixtures live in tests/support."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import settings

from tests.support.system import root_links

# Property tests check answers, not speed: on a shared 2-core machine one example can take
# seconds, and hypothesis's default 200 ms deadline then fails a correct test.
settings.register_profile("shared-machine", deadline=None)
settings.load_profile("shared-machine")


@pytest.fixture
def scenario_file(tmp_path: Path) -> Callable[..., Path]:
    """Writes a scenario given as a dict to a YAML file under the test's tmp_path and returns
    its path: ``scenario_file(SCENARIO)`` or ``scenario_file(SCENARIO, "other.yaml")``."""

    def write(scenario: dict[str, Any], name: str = "scenario.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(scenario), encoding="utf-8")
        return path

    return write


@pytest.fixture
def root_untouched() -> Iterator[None]:
    """A test that builds network namespaces must leave the root namespace's interfaces
    exactly as it found them."""
    before = root_links()
    yield
    assert root_links() == before
