"""Snapshots of the guarded state (torch's config modules and environment), diffs and restores."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .. import _torch
from .._torch import HIDDEN, UNSET, RawEntry
from .environment import environ_stamp, torch_env
from .records import LeakEntry, leak_entry
from .settings import StoredValues, jsonable

if TYPE_CHECKING:
    from .._torch import ConfigAccess

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
        return leak_entry(
            self.written_as or self.qualified_key,
            _shown_value(self.before),
            _shown_value(self.after),
            alias_of=self.qualified_key if self.written_as else None,
        )


def _shown_value(value: Any) -> Any:
    if value is HIDDEN or value is UNSET or value == ENV_UNSET:
        return _show(value)
    return jsonable(value)


def _show(value: Any) -> str:
    if value is HIDDEN or value is UNSET or value == ENV_UNSET:
        return "<deleted>" if value is HIDDEN else "<unset>"
    return repr(value)


class Snapshot:
    """The guarded state at one moment; a module absent from ``modules`` was not imported."""

    def __init__(self, env: dict[str, str], modules: dict[str, dict[str, RawEntry]]) -> None:
        self.env = env
        self.modules = modules

    @classmethod
    def take(cls) -> Snapshot:
        # Before torch is imported no config module is: the torch boundary's config part waits.
        configs = _torch.loaded_guarded_configs() if _torch.torch_loaded() else ()
        return cls(torch_env(), {cfg.name: cfg.snapshot() for cfg in configs})


class _KeyDiff(NamedTuple):
    config: ConfigAccess
    key: str
    before: RawEntry
    after: RawEntry


def _pristine(now: RawEntry) -> RawEntry:
    """What a key held before its module was imported: torch's own default."""
    return RawEntry(UNSET, now.default, False)


def _module_diffs(before: Snapshot, after: Snapshot) -> list[_KeyDiff]:
    diffs = []
    for name, now in after.modules.items():
        cfg = _torch.loaded_config(name)
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


def _env_keys_changed(before: Snapshot, after: Snapshot) -> list[str]:
    """Variables that differ, less torch's own memo of its default cache directory."""
    return [
        key
        for key in sorted(set(before.env) | set(after.env))
        if before.env.get(key) != after.env.get(key)
        and not _torch.is_torch_env_memo(key, before.env.get(key), after.env.get(key))
    ]


def _env_changes(before: Snapshot, after: Snapshot) -> list[Change]:
    return [
        Change("env", k, before.env.get(k, ENV_UNSET), after.env.get(k, ENV_UNSET))
        for k in _env_keys_changed(before, after)
    ]


def _effective_changes(diffs: list[_KeyDiff]) -> list[Change]:
    changes = []
    for diff in diffs:
        then = diff.config.effective(diff.key, diff.before)
        now = diff.config.effective(diff.key, diff.after)
        if _torch.values_differ(now, then):
            alias = _torch.alias_written(diff.config.name, diff.key)
            changes.append(Change(diff.config.name, diff.key, then, now, alias))
    return changes


def restore(before: Snapshot, *, include_env: bool = True) -> list[Change]:
    """Puts the state of ``before`` back; returns what differed in effect."""
    after = Snapshot.take()
    diffs = _module_diffs(before, after)
    env_changes = _env_changes(before, after) if include_env else []
    changes = _effective_changes(diffs) + env_changes
    touched: dict[str, ConfigAccess] = {}
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


class QuickCheck:
    """An O(changes) test of "is the state still what ``Snapshot`` saw", for the hot path.

    It watches the config modules' own change counter, torch's environment variables, which
    config modules are imported, every default object, and the values of mutable keys (changed
    in place; one that cannot be copied is named once by the snapshot, and only its replacement
    is seen).
    """

    def __init__(self, snapshot: Snapshot) -> None:
        self._stamp = environ_stamp()
        self._defaults: list[tuple[ConfigAccess, list[Any]]] = []
        self._mutable = StoredValues([])
        # Without torch the environment is all there is to watch, and nothing of torch's loads.
        self._torch_free = not _torch.torch_loaded()
        if self._torch_free:
            return
        self._count = _torch.change_count()
        self._modules = {name: sys.modules.get(name) for name in _torch.GUARDED_CONFIG_MODULES}
        mutable_readers = []
        for name, entries in snapshot.modules.items():
            cfg = _torch.loaded_config(name)
            if cfg is None:
                continue
            self._defaults.append((cfg, cfg.defaults_vector()))
            mutable_readers += [cfg.raw_reader(key) for key in cfg.mutable_keys(entries)]
        self._mutable = StoredValues(mutable_readers)

    def unchanged(self) -> bool:
        if self._torch_free:
            return not _torch.torch_loaded() and environ_stamp() == self._stamp
        return self._torch_unchanged()

    def _torch_unchanged(self) -> bool:
        if not _torch.counts_every_change():
            return False  # the count proves nothing: the caller compares in full
        if _torch.change_count() != self._count or environ_stamp() != self._stamp:
            return False
        for name, module in self._modules.items():
            if sys.modules.get(name) is not module:
                return False
        for cfg, defaults in self._defaults:
            if cfg.defaults_vector() != defaults:
                return False
        return self._mutable.unchanged()
