"""The names under which the plugin registers its plugin objects (``--trace-config`` shows
them; nothing of the plugin looks one up: the features share a ``core.session.PluginSession``)."""

from __future__ import annotations

from typing import Final

FEATURES: Final = "cudagraph_guard.features"
LEAK_GUARD: Final = "cudagraph_guard.leak_guard"
THREADS: Final = "cudagraph_guard.threads"
ISOLATION_RUNS: Final = "cudagraph_guard.isolation.runs"
REPORT: Final = "cudagraph_guard.report"
REPORT_WRITER: Final = "cudagraph_guard.report_writer"
SUITE: Final = "cudagraph_guard.suite"
CUDAGRAPHS_ON: Final = "cudagraph_guard.cudagraphs_on"
NOTICES: Final = "cudagraph_guard.notices"
