"""Hooks that other plugins may implement (registered by ``plugin.py`` through
``pytest_addhooks``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .core.records import JsonObject
    from .diagnosis import Diagnosis


@pytest.hookspec(firstresult=True)
def pytest_cudagraph_diagnose(exc: BaseException, thread_name: str) -> Diagnosis | None:
    """Classify an exception that the built-in kinds do not know.

    Called for an exception of no built-in kind, or of kind ``thread-error``, seen in a test
    (``thread_name`` is the thread it was raised in). Return a
    :class:`pytest_cudagraph_guard.Diagnosis` to name it, or None to leave it as it is.
    """


@pytest.hookspec
def pytest_cudagraph_report_keys(config: pytest.Config) -> list[str]:
    """Return extra dotted ``torch._inductor.config`` keys to show in the report."""
    return []


@pytest.hookspec
def pytest_cudagraph_record(item: pytest.Item, record: JsonObject) -> None:
    """Called once per reported test with its finished record, as the JSON report holds it
    (builtin types only), where the test's item is (not for a test whose xdist worker died:
    its record is made on the controller, which has no item); what the hook changes in it, the
    report shows."""
