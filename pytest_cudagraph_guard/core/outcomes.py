"""Test outcomes as pytest reports them (a test's, from its phases'), and a skip raised from the
plugin's own code."""

from __future__ import annotations

from typing import Final, NoReturn

import pytest

NO_TORCH: Final = "torch is not installed"
NO_CUDA: Final = "CUDA is not available"


def skip_test(reason: str) -> NoReturn:
    """Skips the running test from the plugin's code, the skip shown at the test's own location
    (as pytest shows a ``skipif`` marker's), not at the plugin's line that raised it."""
    raise pytest.skip.Exception(reason, _use_item_location=True)


def is_skip_or_xfail(exc: BaseException) -> bool:
    """An outcome raised as an exception (``pytest.skip``, ``pytest.xfail``), not an error."""
    return isinstance(exc, (pytest.skip.Exception, pytest.xfail.Exception))


def phase_outcome(report: pytest.TestReport) -> str:
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
