"""Markers by folder: tests/unit → unit, tests/integration → integration, tests/e2e → e2e."""

from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.fspath)).relative_to(_HERE).parts[0]
        if folder in ("unit", "integration", "e2e", "infra", "cluster"):
            item.add_marker(getattr(pytest.mark, folder))
