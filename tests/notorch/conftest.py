"""Fixtures for the tests that run where torch is not installed; nothing here imports torch."""

from __future__ import annotations

import pytest


@pytest.fixture
def tester(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester whose sessions get an empty ini, so only the plugin's defaults apply."""
    pytester.makeini("[pytest]\n")
    return pytester
