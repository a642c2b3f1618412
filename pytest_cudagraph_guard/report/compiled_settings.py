"""A test's settings as torch compiled with them: the values its compiles saw, and where the test
changed them afterwards (a ``tearDown``, the end of a ``config.patch`` block), the value at the
end beside them."""

from __future__ import annotations

import json
from typing import NamedTuple

from ..core.records import SettingEntry, setting_entry
from ..core.settings import jsonable
from .activity import TestActivity

COMPILE_SOURCE = "compile"
TEST_SOURCE = "test"
DEFAULT_SOURCE = "default"


class CompiledSettings(NamedTuple):
    settings: dict[str, SettingEntry]  # as compiled with (at the end where nothing compiled)
    at_end: dict[str, SettingEntry]  # the keys whose value at the end differs from the compile's


def compiled_settings(
    at_end: dict[str, SettingEntry], activity: TestActivity | None
) -> CompiledSettings:
    if activity is None or not activity.compiled:
        return CompiledSettings(at_end, {})
    settings = _with_compile_sources(at_end, activity)
    changed: dict[str, SettingEntry] = {}
    for key, raw in activity.compiled_settings().items():
        entry = settings.get(key)
        value = jsonable(raw)
        if entry is None or entry["source"] == COMPILE_SOURCE or entry["value"] == value:
            continue
        changed[key] = entry
        settings[key] = setting_entry(value, _source_at_compile(entry))
    return CompiledSettings(settings, changed)


def _source_at_compile(at_end: SettingEntry) -> str:
    """A value that differed at compile from the one at the end was set by the test, unless an
    environment variable decided it both times."""
    return TEST_SOURCE if at_end["source"] == DEFAULT_SOURCE else at_end["source"]


def _with_compile_sources(
    settings: dict[str, SettingEntry], activity: TestActivity
) -> dict[str, SettingEntry]:
    """A key that every inductor compile of the test set through its options is shown as
    ``compile``."""
    merged = dict(settings)
    options = [c.options for c in activity.compiled if c.backend == "inductor"]
    if not options:
        return merged
    for key in set(options[0]).intersection(*options[1:]):
        values = {json.dumps(jsonable(o[key])) for o in options}
        value = jsonable(options[0][key])
        if len(values) == 1 and key in merged and merged[key]["value"] != value:
            merged[key] = setting_entry(value, COMPILE_SOURCE)
    return merged
