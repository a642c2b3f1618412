"""The thread marker's plugin object: runs a marked test's call phase in its threads."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from ..core import plugin_names
from ..core.diagnosis import hook_diagnoser
from ..core.markers import plugin_marks, thread_options


class ThreadsPlugin:
    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
        mark = plugin_marks(pyfuncitem)[0]
        if mark is None:
            return (yield)
        from .run import call_in_threads

        config = pyfuncitem.config
        reporter: plugin_names.ReadsSettings | None = config.pluginmanager.get_plugin(
            plugin_names.REPORT
        )
        keys = reporter.extra_keys() if reporter is not None else None
        with call_in_threads(pyfuncitem, thread_options(mark), hook_diagnoser(config), keys):
            return (yield)
