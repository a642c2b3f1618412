"""GPU tests: they run where CUDA is available (the lent H200, torch 2.11) and skip elsewhere."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="CUDA is not available")
    for item in items:
        if "tests/gpu/" in item.nodeid:
            item.add_marker(skip)


@pytest.fixture
def gpu_tester(ourtester: pytest.Pytester) -> pytest.Pytester:
    """The inner-session runner of every test here (the root conftest's clean ini)."""
    return ourtester
