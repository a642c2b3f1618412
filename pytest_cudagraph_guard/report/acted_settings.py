"""A test's settings as torch acted under them, for :mod:`.plugin`'s record: for each key, its value
at the first moment torch compiled, recorded or replayed in a thread where the test's body ran, else
at the test's end. Other threads (one the test started, torch's own) are not where the test's
settings apply: what they compiled under is in each compile's entry, and a divergence from the
test's is a finding. A value that a ``tearDown`` or the end of a ``with`` block put back is no value
of the test's; a key torch acted under with several values lists them."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any, Final, NamedTuple

from ..core.records import SettingEntry, setting_entry
from ..core.settings import default_entry, jsonable
from .activity import Moment, TestActivity

COMPILE_SOURCE: Final = "compile"
TEST_SOURCE: Final = "test"


class ActedSettings(NamedTuple):
    settings: dict[str, SettingEntry]  # at torch's first moment (at the end where it had none)
    at_end: dict[str, SettingEntry]  # the keys whose value at the end differs (JSON only)
    varied: dict[str, list[Any]]  # the keys torch acted under with several values, in order


class _Value(NamedTuple):
    value: Any  # builtin types
    from_options: bool  # set by the options of a compile


def settings_as_acted(
    at_end: dict[str, SettingEntry], activity: TestActivity | None, body_threads: Collection[str]
) -> ActedSettings:
    """``at_end``: the settings read where the body ran, at its end; ``body_threads``: the names
    of the threads the body ran in."""
    moments = activity.moments if activity is not None else []
    seen = _values_by_key([m for m in moments if m.thread in body_threads])
    settings = dict(at_end)
    varied: dict[str, list[Any]] = {}
    for key, values in seen.items():
        end = at_end.get(key)
        if end is None:
            continue
        settings[key] = setting_entry(values[0].value, _source(key, values[0], end))
        distinct = list({_identity(v.value): v.value for v in values}.values())
        if len(distinct) > 1:
            varied[key] = distinct
    changed = {
        key: end
        for key, end in at_end.items()
        if key in seen
        and settings[key]["source"] != COMPILE_SOURCE
        and _identity(settings[key]["value"]) != _identity(end["value"])
    }
    return ActedSettings(settings, changed, varied)


def _values_by_key(moments: list[Moment]) -> dict[str, list[_Value]]:
    """Each key's values at the moments, in order. A key that a compile's options set is the
    compiles' alone: a recording or replay of that graph happens outside its options."""
    by_options = frozenset().union(*(m.options for m in moments))
    found: dict[str, list[_Value]] = {}
    for moment in moments:
        for key, value in moment.values.items():
            if moment.options or key not in by_options:
                found.setdefault(key, []).append(_Value(jsonable(value), key in moment.options))
    return found


def _source(key: str, first: _Value, end: SettingEntry) -> str:
    """Where the value torch acted under came from: a compile's options, the same source as at
    the end for the same value, else the default (or the variable that decided it), else the
    test."""
    if first.from_options:
        return COMPILE_SOURCE
    if _identity(first.value) == _identity(end["value"]):
        return end["source"]
    default = default_entry(key)
    if default is not None and _identity(default["value"]) == _identity(first.value):
        return default["source"]
    return TEST_SOURCE


def _identity(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)
