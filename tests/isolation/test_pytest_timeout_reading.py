"""How the parent reads a test process that pytest-timeout's ``thread`` method ended (its stacks
dumped between two ``Timeout`` rules, then exit code 1), on pytest-timeout's settings as the
parent keeps them: no process here; tests/ecosystem/test_timeout.py runs both methods for real."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_cudagraph_guard.isolation.runner import _ended_by_pytest_timeout, keep_pytest_timeout

DUMP = (
    "\n+++++++++++++++++++++++++++++++++++ Timeout +++++++++++++++++++++++++++++++++++\n"
    "~~~~~~~~~~~~~~~~~~~~~~~~~~ Stack of MainThread (1) ~~~~~~~~~~~~~~~~~~~~~~~~~~~\n"
    '  File "test_mod.py", line 4, in test_sleeps\n'
    "    time.sleep(60)\n"
    "+++++++++++++++++++++++++++++++++++ Timeout +++++++++++++++++++++++++++++++++++"
)


def _item(seconds: object, method: str) -> pytest.Item:
    """What the parent keeps of an item: its stash, with pytest-timeout's settings kept."""
    item = SimpleNamespace(stash=pytest.Stash())
    keep_pytest_timeout(item, SimpleNamespace(timeout=seconds, method=method))  # type: ignore[arg-type]
    return item  # type: ignore[return-value]


def _exited(code: int) -> int:
    """The wait status of a process that exited with ``code`` (``os.waitpid``'s)."""
    return code << 8


def test_the_thread_methods_exit_is_its_own_failure_with_the_dump() -> None:
    item = _item(2.0, "thread")
    stderr = "a line the test wrote" + DUMP
    found = _ended_by_pytest_timeout(item, _exited(1), stderr)
    assert found == ("Timeout (>2.0s) from pytest-timeout.", DUMP.lstrip("\n"))


@pytest.mark.parametrize(
    ("seconds", "method", "status", "stderr"),
    [
        pytest.param(2.0, "signal", _exited(1), DUMP, id="the signal method fails in place"),
        pytest.param(2.0, "thread", _exited(2), DUMP, id="another exit code"),
        pytest.param(2.0, "thread", None, DUMP, id="a process lost"),
        pytest.param(2.0, "thread", _exited(1), "no dump", id="an exit of 1 without the dump"),
        pytest.param(0, "thread", _exited(1), DUMP, id="no timeout: pytest-timeout is off"),
        pytest.param(None, "thread", _exited(1), DUMP, id="no timeout set"),
    ],
)
def test_any_other_end_is_not_pytest_timeouts(
    seconds: object, method: str, status: int | None, stderr: str
) -> None:
    assert _ended_by_pytest_timeout(_item(seconds, method), status, stderr) is None
