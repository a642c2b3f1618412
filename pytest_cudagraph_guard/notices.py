"""Delivers, as ``CudagraphGuardWarning``, what the torch boundary noted: parts of the plugin that
cannot work on the installed torch, and internal errors of ours caught inside torch's calls.

Notices are noted where they happen (inside a compile, an import, a worker thread) and warned
here, from hooks where pytest records warnings and nothing of torch's or the user's is on the
stack. Each is warned once per session. Registered by ``plugin.py`` in every session."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from .core.warnings import warn_torch_notices
from .fault_guard import Loss, Part, guards

_DELIVERY = Part(Loss("cudagraph_guard", "its warnings delivered at each test's teardown"))


class NoticesPlugin:
    """Registered for every session. What the leak guard's own check notes at a test's
    teardown, the guard warns itself: the order of the two teardown wrappers does not matter."""

    @pytest.hookimpl(trylast=True)
    @guards(_DELIVERY)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        warn_torch_notices(session.config, when="collect")

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    @guards(_DELIVERY)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        try:
            return (yield)
        finally:
            warn_torch_notices(item.config, nodeid=item.nodeid)

    @guards(_DELIVERY)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        warn_torch_notices(session.config)
