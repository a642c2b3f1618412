from __future__ import annotations

from collections.abc import Iterator

import pytest

from .forked_sessions import ForkedSessions


@pytest.fixture(scope="module")
def forked_sessions() -> Iterator[ForkedSessions]:
    """Inner sessions forked from a process that has imported torch (``ForkedSessions``)."""
    sessions = ForkedSessions()
    try:
        yield sessions
    finally:
        sessions.close()
