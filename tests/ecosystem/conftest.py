"""Sessions beside the plugins real CUDA suites carry (pinned in the ``test`` extra): each inner
session loads them all (the other tests' sessions load none: see ``tests/conftest.py``) with an
ini that they start quietly with, and pytest-randomly and pytest-rerunfailures only where a test
asks for them (``-p randomly``, ``-p rerunfailures``)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import all_gone

# The plugins of the test extra these tests run beside (the release matrix's oldest pytest runs
# without them: they need a newer one).
PLUGINS = (
    "pytest_timeout",
    "pytest_cov",
    "pytest_rerunfailures",
    "pytest_repeat",
    "pytest_randomly",
    "hypothesis",
    "pytest_asyncio",
    "pytest_mock",
)
MISSING = [name for name in PLUGINS if importlib.util.find_spec(name) is None]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if MISSING:
        skip = pytest.mark.skip(reason=f"not installed: {', '.join(MISSING)} (the test extra)")
        for item in items:
            if "tests/ecosystem/" in item.nodeid:
                item.add_marker(skip)


# pytest-asyncio warns at every start where its loop scope is unset; the NumPy line is torch's.
ECOSYSTEM_INI = """[pytest]
asyncio_default_fixture_loop_scope = function
filterwarnings =
    ignore:Failed to initialize NumPy:UserWarning
"""
# Warnings are errors but for torch's NumPy line: pytest's later filters take precedence.
STRICT_INI = ECOSYSTEM_INI.replace("filterwarnings =\n", "filterwarnings =\n    error\n")
# Written by an inner test into the file $PIDS: the process it ran in and that process's parent.
RECORD_PIDS = """
import os as _os

def _record_pids():
    with open(_os.environ["PIDS"], "a") as _file:
        _file.write(f"{_os.getpid()} {_os.getppid()}\\n")
"""


@pytest.fixture
def eco(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """An inner session's folder with the ecosystem ini; ``$PIDS`` names where its tests write
    their processes' pids (:data:`RECORD_PIDS`)."""
    pytester.makeini(ECOSYSTEM_INI)
    monkeypatch.setenv("PIDS", str(pytester.path / "pids"))
    # Every plugin starts, as in a user's run, but pytest-randomly's shuffle and
    # pytest-rerunfailures's socket server: a test asks for them (``-p randomly``).
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:randomly -p no:rerunfailures")
    return pytester


@pytest.fixture
def no_process_left(eco: pytest.Pytester) -> Callable[[], None]:
    """Checks that every process an inner test recorded (but this one) has ended."""

    def check() -> None:
        path: Path = eco.path / "pids"
        text = path.read_text() if path.exists() else ""
        pids = {int(pid) for line in text.splitlines() for pid in line.split()}
        pids -= {os.getpid(), os.getppid()}
        assert all_gone(sorted(pids)), f"left running: {sorted(pids)}"

    return check


def counts(result: pytest.RunResult) -> dict[str, int]:
    """The outcomes and warnings of a session's summary line."""
    return result.parseoutcomes()


def no_internal_error(result: pytest.RunResult) -> None:
    text = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in text, text
