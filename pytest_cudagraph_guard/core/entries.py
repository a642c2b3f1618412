"""The entries that features make for a test's record: an exception seen (an error, a finding or
the plugin's own failure, by its kind), a setting's value and source, a setting the test left
changed. Builtin values only: they reach the report's JSON (:mod:`.records`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ErrorEntry:
    """An exception seen in a test (or a test process that died), named and explained."""

    thread: str
    type: str
    message: str
    kind: str | None  # one of :mod:`.kinds`; None: of no kind
    hint: str | None = None
    traceback: str = ""


@dataclass(frozen=True, slots=True)
class SettingEntry:
    """A setting's effective value (builtin types) and where it comes from."""

    value: Any
    source: str


@dataclass(frozen=True, slots=True)
class LeakEntry:
    """A setting the test left changed, as the user named it; the guard restored it."""

    key: str
    before: Any
    after: Any
    alias_of: str | None = None  # the setting an alias key stands for
