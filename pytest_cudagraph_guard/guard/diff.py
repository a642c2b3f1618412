"""What differs between two snapshots of the guarded state (:mod:`.state`), in effect,
and putting the earlier one back, for the leak guard and the thread marker (``threads.run``):
loaded once something changed."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .._torch import values
from .state import Snapshot

if TYPE_CHECKING:
    from .._torch import config_access
    from ..core.entries import LeakEntry

ENV_UNSET: Final = "<unset>"


class Change(NamedTuple):
    """One setting whose effective value differs between two snapshots; ``written_as`` is the
    dotted alias the user wrote it through, if any."""

    where: str
    key: str
    before: Any
    after: Any
    written_as: str | None = None

    def describe(self) -> str:
        return f"{self.shown_key}: {_show(self.before)} -> {_show(self.after)}"

    @property
    def qualified_key(self) -> str:
        return f"${self.key}" if self.where == "env" else f"{self.where}.{self.key}"

    @property
    def shown_key(self) -> str:
        """The key as the user wrote it, with the setting it stands for after an alias."""
        if self.written_as is None:
            return self.qualified_key
        return f"{self.written_as} (alias of {self.key})"

    def as_leak(self) -> LeakEntry:
        from ..core.entries import LeakEntry
        from ..torch_settings import jsonable  # the markers as their repr, as in _show

        return LeakEntry(
            key=self.written_as or self.qualified_key,
            before=jsonable(self.before),
            after=jsonable(self.after),
            alias_of=self.qualified_key if self.written_as else None,
        )


def _show(value: Any) -> str:
    """A value in a leak's message: the markers bare (theirs is their ``repr``)."""
    return ENV_UNSET if isinstance(value, str) and value == ENV_UNSET else repr(value)


class _KeyDiff(NamedTuple):
    config: config_access.ConfigAccess
    key: str
    before: values.RawEntry
    after: values.RawEntry


def _pristine(now: values.RawEntry) -> values.RawEntry:
    """What a key held before its module was imported: torch's own default."""
    return values.RawEntry(values.UNSET, now.default, False)


def _module_diffs(before: Snapshot, after: Snapshot) -> list[_KeyDiff]:
    if not after.modules:  # no config module imported: nothing of torch's to load
        return []
    from .._torch import config_access

    diffs = []
    for name, now in after.modules.items():
        cfg = config_access.loaded_config(name)
        if cfg is None:
            continue
        then = before.modules.get(name)
        for key, raw_now in now.items():
            raw_then = then.get(key) if then is not None else None
            if raw_then is None:
                raw_then = _pristine(raw_now)
            if not raw_now.same_as(raw_then):
                diffs.append(_KeyDiff(cfg, key, raw_then, raw_now))
    return diffs


def _env_changes(before: Snapshot, after: Snapshot) -> list[Change]:
    """Variables that differ, less torch's own memo of its default cache directory."""
    keys = sorted(set(before.env) | set(after.env))
    changed = [key for key in keys if before.env.get(key) != after.env.get(key)]
    if not changed:  # nothing to ask torch's side about
        return []
    from .._torch import env_sources

    return [
        Change("env", k, before.env.get(k, ENV_UNSET), after.env.get(k, ENV_UNSET))
        for k in changed
        if not env_sources.is_torch_env_memo(k, before.env.get(k), after.env.get(k))
    ]


def _effective_changes(diffs: list[_KeyDiff]) -> list[Change]:
    if not diffs:  # none of a config module's: nothing of torch's to load
        return []
    from .._torch import counting

    changes = []
    for diff in diffs:
        then = diff.config.effective(diff.key, diff.before)
        now = diff.config.effective(diff.key, diff.after)
        if values.values_differ(now, then):
            alias = counting.alias_written(diff.config.name, diff.key)
            changes.append(Change(diff.config.name, diff.key, then, now, alias))
    return changes


def restore(before: Snapshot, *, include_env: bool = True) -> list[Change]:
    """Puts the state of ``before`` back; returns what differed in effect."""
    after = Snapshot.take()
    diffs = _module_diffs(before, after)
    env_changes = _env_changes(before, after) if include_env else []
    changes = _effective_changes(diffs) + env_changes
    touched: dict[str, config_access.ConfigAccess] = {}
    for diff in diffs:
        diff.config.write(diff.key, diff.before)
        touched[diff.config.name] = diff.config
    for cfg in touched.values():
        cfg.mark_dirty()
    for change in env_changes:
        if change.before == ENV_UNSET:
            os.environ.pop(change.key, None)
        else:
            os.environ[change.key] = change.before
    return changes


def absorb(baseline: Snapshot, before: Snapshot, after: Snapshot) -> None:
    """Takes into ``baseline`` what changed between ``before`` and ``after``."""
    for name, now in after.modules.items():
        then = before.modules.get(name)
        target = baseline.modules.setdefault(name, {})
        for key, raw_now in now.items():
            raw_then = then.get(key) if then is not None else None
            if raw_then is None or not raw_now.same_as(raw_then):
                target[key] = raw_now
    for key in set(before.env) | set(after.env):
        if before.env.get(key) != after.env.get(key):
            if key in after.env:
                baseline.env[key] = after.env[key]
            else:
                baseline.env.pop(key, None)
