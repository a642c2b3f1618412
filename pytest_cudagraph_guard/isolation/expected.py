"""Whether the death of a test's process was expected: ``xfail`` across the process boundary as
pytest-forked has it. A crash or timeout of an ``xfail`` test is ``xfailed``, unless the mark
names the exceptions it expects (``raises=``): a signal is none of them."""

from __future__ import annotations

from typing import Any

import pytest

# pytest's own reading of a test's xfail marks (conditions, reason, raises); private.
_PYTEST_XFAIL_READER = "_pytest.skipping.evaluate_xfail_marks"


def expected_death(item: pytest.Item) -> tuple[str | None, str | None]:
    """The xfail reason under which the death of ``item``'s process counts as ``xfailed`` (None
    where it is a failure), and what to tell the user once if pytest's reading of the marks
    could not be used."""
    if item.config.option.runxfail or item.get_closest_marker("xfail") is None:
        return None, None
    reader = _pytest_xfail_reader()
    if reader is None:
        return None, (
            f"cudagraph_subprocess: pytest {pytest.__version__} has no {_PYTEST_XFAIL_READER}: "
            "a crash or timeout of an xfail test is reported as failed"
        )
    try:
        xfailed = reader(item)
    except Exception:  # a bad condition: the test's own session has reported it
        return None, None
    if xfailed is None or getattr(xfailed, "raises", None) is not None:
        return None, None
    return str(getattr(xfailed, "reason", "")), None


def _pytest_xfail_reader() -> Any:
    try:
        from _pytest import skipping
    except ImportError:
        return None
    reader = getattr(skipping, "evaluate_xfail_marks", None)
    return reader if callable(reader) else None
