"""What the ``cudagraph_thread`` marker did in a test, for the report (kept in the test's stash
under ``stash_keys.thread_run_key``); loaded by the features that write or read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .records import ErrorEntry, SettingEntry


@dataclass
class ThreadRunFacts:
    """What the ``cudagraph_thread`` marker did in one test's call phase."""

    where: str  # shown as the test's place in the report, e.g. "thread x 2"
    threads: tuple[str, ...]  # the names of the marker's threads
    switches: dict[str, bool]  # the cudagraph settings the marker turned on in its threads
    errors: list[ErrorEntry] = field(default_factory=list)  # what each thread raised
    settings: dict[str, SettingEntry] | None = None  # as the first thread saw them; None: unread
