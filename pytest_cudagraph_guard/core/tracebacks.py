"""Where an exception was raised, read from its traceback, for :mod:`.diagnosis` and the leak
guard. Standard library only."""

from __future__ import annotations

from types import TracebackType


def innermost(exc: BaseException) -> TracebackType | None:
    """The entry of ``exc``'s traceback for the frame that raised it; None without a traceback."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb
