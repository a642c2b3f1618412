"""The kinds of the report's error entries: what ``--cudagraph-fail-on`` names, the diagnosis
gives an exception, and the report groups its entries by."""

from __future__ import annotations

from typing import Final

TLS_MISSING: Final = "tls-missing"
CAPTURE_CONFLICT: Final = "capture-conflict"
TLS_CORRUPT: Final = "tls-corrupt"
CONFIG_DIVERGENCE: Final = "config-divergence"
PROCESS_CRASH: Final = "process-crash"
TIMEOUT: Final = "timeout"
THREAD_ERROR: Final = "thread-error"
CROSS_THREAD_GRAPH: Final = "cross-thread-graph"
OVERWRITTEN_OUTPUT: Final = "overwritten-output"
POOL_LEAK: Final = "pool-leak"
RERECORD: Final = "rerecord"
SLOW_PATH: Final = "slow-path"
PLUGIN_ERROR: Final = "plugin-error"  # a failure of the plugin's own code: a note, never an error
UNCLASSIFIED: Final = "unclassified"  # how text names an error of no kind (JSON: null)
# Entries that do not fail a test by themselves (``--cudagraph-fail-on`` may make them).
FINDING_KINDS: Final = (CONFIG_DIVERGENCE, CROSS_THREAD_GRAPH, RERECORD, SLOW_PATH)
ALL_KINDS: Final = (
    TLS_MISSING,
    CAPTURE_CONFLICT,
    TLS_CORRUPT,
    OVERWRITTEN_OUTPUT,
    POOL_LEAK,
    PROCESS_CRASH,
    TIMEOUT,
    THREAD_ERROR,
    *FINDING_KINDS,
)
