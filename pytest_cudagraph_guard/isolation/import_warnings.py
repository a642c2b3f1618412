"""Which of a test's warnings an import raised, in the test's own process.

In-process, a module a test imports warns once, for the first test that imports it; every test
process imports it afresh and would warn again, once per test. So the test process marks the
warnings an import raised (an import's frames were on the stack as the warning was recorded) and
the parent shows each of those once a session (:func:`.runner._warn`), as in-process.

The mark is taken where ``warnings.catch_warnings(record=True)`` (pytest's, around each test)
records a warning: ``warnings._showwarnmsg_impl``, which it sets to its log's ``append``.
Standard library only.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Final

# The modules of importlib's own code, as the frames it runs a module's code from name them.
_IMPORT_MACHINERY: Final = frozenset(
    {
        "_frozen_importlib",
        "_frozen_importlib_external",
        "importlib._bootstrap",
        "importlib._bootstrap_external",
    }
)


class ImportWarnings:
    """The warnings an import raised during the last test watched (kept alive, compared by
    identity: the very objects pytest's log holds)."""

    def __init__(self) -> None:
        self._marked: list[warnings.WarningMessage] = []

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Mark the warnings recorded meanwhile that an import raised (the marks of the test
        before dropped)."""
        self._marked.clear()
        record: Callable[[Any], None] = warnings._showwarnmsg_impl  # type: ignore[attr-defined]

        def mark_and_record(message: Any) -> None:
            if _importing():
                self._marked.append(message)
            record(message)

        warnings._showwarnmsg_impl = mark_and_record  # type: ignore[attr-defined]
        try:
            yield
        finally:
            if warnings._showwarnmsg_impl is mark_and_record:  # type: ignore[attr-defined]
                warnings._showwarnmsg_impl = record  # type: ignore[attr-defined]

    def raised_by_import(self, message: object) -> bool:
        return any(marked is message for marked in self._marked)


def _importing() -> bool:
    """Whether a module's code is executing: a module's frame (``<module>``) that importlib's
    code called is on the stack. Not importlib's frames alone: ``from package import name`` on
    a loaded package runs through them too, and may call the package's ``__getattr__``."""
    frame = sys._getframe(1)
    while frame is not None:
        caller = frame.f_back
        if (
            frame.f_code.co_name == "<module>"
            and caller is not None
            and caller.f_globals.get("__name__") in _IMPORT_MACHINERY
        ):
            return True
        frame = caller  # type: ignore[assignment]
    return False
