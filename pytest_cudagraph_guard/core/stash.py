"""The stash keys under which one feature leaves what another reads, so that no feature imports
another: each key, who writes it and who reads it. (A key that one module keeps for itself
stays beside it.)"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import pytest

if TYPE_CHECKING:
    from .entries import ErrorEntry, LeakEntry, SettingEntry

T = TypeVar("T")
D = TypeVar("D")


@dataclass
class ThreadRunFacts:
    """What the ``cudagraph_thread`` marker did in one test's call phase."""

    where: str  # shown as the test's place in the report, e.g. "thread x 2"
    threads: tuple[str, ...]  # the names of the marker's threads
    switches: dict[str, bool]  # the cudagraph settings the marker turned on in its threads
    errors: list[ErrorEntry] = field(default_factory=list)  # what each thread raised
    settings: dict[str, SettingEntry] | None = None  # as the first thread saw them; None: unread


# Item: written by ``threads.run`` as the marker's threads end; read by ``report.plugin`` for the
# test's record (the threads' errors, settings and place).
thread_run_key: pytest.StashKey[ThreadRunFacts] = pytest.StashKey()
# Item: what the leak guard (``guard.plugin``) found the test left changed (and restored), set
# before the teardown report; read by ``report.plugin`` for the record's leaks.
leaks_key: pytest.StashKey[list[LeakEntry]] = pytest.StashKey()


class TestDevices(NamedTuple):
    """The GPUs a ``cudagraph_subprocess(gpus=K)`` test's process gets: the variables that give
    them (empty: it inherits the session's), or why the test is skipped (the host has fewer)."""

    env: dict[str, str]
    skip: str | None = None


# Config: the GPUs for a test process that needs ``K`` of them (``gpus=K``); written by the
# devices feature (``devices.plugin``) as the session configures, in the session that runs the
# tests (never in a test process); read by ``isolation`` (the test process's environment) and by
# ``plugin.py`` (the skip, where the host has fewer).
test_devices_key: pytest.StashKey[Callable[[int], TestDevices]] = pytest.StashKey()
# Item: the option that applied a marker of the plugin to the test, e.g.
# ``--cudagraph-subprocess``: written by ``suite``; read by ``core.markers`` (where a marker
# came from) and by ``report.plugin`` and ``crash.death`` (the record's ``applied_by``).
applied_by_key: pytest.StashKey[str] = pytest.StashKey()
# Config: set by a test process's own plugin (``isolation.child``) before its session
# configures: the session runs one marked test of the parent's; read by ``core.session``.
test_process_key: pytest.StashKey[bool] = pytest.StashKey()
# Config: where this test process keeps its CUDA-graph journal (``crash.journal``), for the
# process that reads it after a crash: written by a cudagraph_subprocess test process
# (``isolation.child``; a spare learns its test's folder only when it gets its test, hence a
# callable; None: no journal now); read by ``crash.activity_journal``.
journal_path_key: pytest.StashKey[Callable[[], str | None]] = pytest.StashKey()
# Item: failures of the plugin's own code met in the test's hooks and fixtures (kind
# ``plugin-error``): written by ``fault_guard``; read by ``report.plugin`` for the record.
plugin_errors_key: pytest.StashKey[list[ErrorEntry]] = pytest.StashKey()


def take(item: pytest.Item, key: pytest.StashKey[T], default: D) -> T | D:
    """What one run of the test left under an item key, taken off the item: a rerun of the same
    item (pytest-rerunfailures) starts without the last run's leaks, errors and threads."""
    if key not in item.stash:
        return default
    value = item.stash[key]
    del item.stash[key]
    return value
