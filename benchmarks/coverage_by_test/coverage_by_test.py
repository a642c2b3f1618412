"""A pytest plugin for ``coverage_tiers.py``: each test's node id becomes the coverage context of
this process and of every process started while it runs."""

from __future__ import annotations

import os

import pytest
from sitecustomize import TEST_VARIABLE, switch_to_the_test


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logstart(nodeid: str) -> None:
    os.environ[TEST_VARIABLE] = nodeid
    switch_to_the_test()
