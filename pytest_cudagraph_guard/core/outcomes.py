"""Test outcomes as pytest reports them, read in one place."""

from __future__ import annotations

from typing import Any

import pytest


def is_skip_or_xfail(exc: BaseException) -> bool:
    """An outcome raised as an exception (``pytest.skip``, ``pytest.xfail``), not an error."""
    return isinstance(exc, (pytest.skip.Exception, pytest.xfail.Exception))


def phase_outcome(report: Any) -> str:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    return str(report.outcome)


def overall_outcome(outcomes: dict[str, str]) -> str:
    """A test's outcome from its phases' outcomes."""
    setup = outcomes.get("setup", "passed")
    if setup == "failed":
        return "error"
    if setup != "passed":
        return setup
    call = outcomes.get("call", "passed")
    if call == "passed" and outcomes.get("teardown") == "failed":
        return "error"
    return call
