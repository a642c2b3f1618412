"""The stash keys of what one feature learns about a test and another feature shows.

The threads feature, the leak guard and the suite options write these and the report reads them,
so no feature imports another.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the keys are typed by their annotations: loading them loads no records
    from .records import ErrorEntry, LeakEntry
    from .thread_run_facts import ThreadRunFacts


thread_run_key: pytest.StashKey[ThreadRunFacts] = pytest.StashKey()

# What the leak guard found the test left changed (and restored), set before the teardown report.
leaks_key: pytest.StashKey[list[LeakEntry]] = pytest.StashKey()
# The option that applied a marker of the plugin to the test, e.g. ``--cudagraph-subprocess``.
applied_by_key: pytest.StashKey[str] = pytest.StashKey()
# Where this test process keeps its CUDA-graph journal (core.journal), for the process that reads
# it after a crash: set by a cudagraph_subprocess test process (a spare learns its test's folder
# only when it gets its test, hence a callable; None: no journal now).
journal_path_key: pytest.StashKey[Callable[[], str | None]] = pytest.StashKey()
# Failures of the plugin's own code met in the test's hooks and fixtures (kind ``plugin-error``).
plugin_errors_key: pytest.StashKey[list[ErrorEntry]] = pytest.StashKey()
