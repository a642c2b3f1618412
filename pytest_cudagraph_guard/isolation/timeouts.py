"""pytest-timeout beside test processes: a test that runs in a process of its own has its timeout
enforced there, as pytest-timeout does in an xdist worker, and the parent only waits.

The parent's ``pytest_timeout_set_timer`` (:mod:`.plugin`) keeps pytest-timeout's settings for
the test instead of setting its timer; :mod:`.controller` bounds its wait by them and reads a
process that pytest-timeout's ``thread`` method ended (it dumps the stacks, then exits 1).
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import pytest

from ..core.marker_arguments import SubprocessOptions

# How long the parent waits beyond pytest-timeout's timeout, which the test process enforces
# itself, before it stops the process as at the marker's timeout.
MARGIN_S: Final = 5.0
# pytest-timeout's thread method dumps the stacks between two lines of this title, then exits 1.
THREAD_METHOD_EXIT_CODE: Final = 1
_DUMP_TITLE: Final = " Timeout "


class PytestTimeout(NamedTuple):
    """What pytest-timeout gives one test (``timeout_method``: ``signal`` or ``thread``)."""

    seconds: float
    method: str


_key = pytest.StashKey[PytestTimeout]()


def keep(item: pytest.Item, settings: Any) -> None:
    """Keeps pytest-timeout's ``Settings`` for ``item`` (a timeout of 0 or none: no timeout)."""
    seconds = getattr(settings, "timeout", None)
    if isinstance(seconds, (int, float)) and seconds > 0:
        item.stash[_key] = PytestTimeout(float(seconds), str(getattr(settings, "method", "")))


def of(item: pytest.Item) -> PytestTimeout | None:
    return item.stash.get(_key, None)


def bounded(item: pytest.Item, options: SubprocessOptions) -> SubprocessOptions:
    """The marker's options, its timeout no longer than pytest-timeout's and the margin: the
    shorter of the two stops the test."""
    found = of(item)
    if found is None or found.seconds + MARGIN_S >= options.timeout:
        return options
    return options._replace(timeout=found.seconds + MARGIN_S)


def ended_by_thread_method(
    item: pytest.Item, exit_code: int | None, stderr: str
) -> tuple[str, str] | None:
    """Where pytest-timeout's ``thread`` method ended the test's process: its own failure
    message, and what it wrote as it timed the test out (from its first ``Timeout`` line)."""
    found = of(item)
    if found is None or found.method != "thread" or exit_code != THREAD_METHOD_EXIT_CODE:
        return None
    lines = stderr.splitlines()
    for index, line in enumerate(lines):
        if _DUMP_TITLE in line and line.strip().startswith("+"):
            return f"Timeout (>{found.seconds}s) from pytest-timeout.", "\n".join(lines[index:])
    return None
