"""pytest's terminal in a test process (``isolation.terminal``), with no process: what pytest
writes there is dropped, unless pytest-timeout writes it."""

from __future__ import annotations

import pytest

from pytest_cudagraph_guard.isolation.terminal import PytestChatter


def test_what_pytest_writes_to_a_test_process_terminal_is_dropped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    chatter = PytestChatter()

    def deep(levels: int) -> int:  # however deep pytest writes from, no pytest-timeout found
        return chatter.write("collected 1 item\n") if levels == 0 else deep(levels - 1)

    for levels in (0, 60):
        assert deep(levels) == len("collected 1 item\n")
    assert capsys.readouterr() == ("", "")
    assert not chatter.isatty()
