"""The guard object behind the ``inductor_config`` and ``dynamo_config`` fixtures, made by
:mod:`..fixtures` (public as ``ConfigGuard``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from .._torch import config_access, values


class ConfigKeyError(KeyError):
    """An unknown config key; the message names it and the closest known keys."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ConfigGuard:
    """Dotted-key access to one torch config module, snapshotted when created.

    ``restore()`` (called by the fixture after the test, whatever its outcome) puts back every
    key the test changed, by any means: through this object, ``config.patch``, plain assignment,
    ``del`` or ``mock.patch``.
    """

    def __init__(self, config: config_access.ConfigAccess) -> None:
        self._config = config
        self._start = config.snapshot()

    @property
    def module(self) -> ModuleType:
        return self._config.module

    def __getitem__(self, key: str) -> Any:
        self._check(key)
        if self._config.raw(key).hidden:
            raise ConfigKeyError(f"{key!r} of {self._config.name} was deleted (del or mock.patch)")
        return getattr(self.module, key)

    def __setitem__(self, key: str, value: Any) -> None:
        self._check(key)
        setattr(self.module, key, value)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._config.has_key(key)

    def keys(self) -> list[str]:
        return self._config.all_keys()

    def update(self, changes: Mapping[str, Any]) -> None:
        """Sets every key of ``changes``; an unknown key sets none of them."""
        for key in changes:
            self._check(key)
        for key, value in changes.items():
            setattr(self.module, key, value)

    @contextmanager
    def patch(self, changes: Mapping[str, Any] | None = None, **kwargs: Any) -> Iterator[None]:
        """Changes keys for the ``with`` block only (dotted keys in ``changes``)."""
        wanted = {**(changes or {}), **kwargs}
        for key in wanted:
            self._check(key)
        saved = {key: self._config.saved(key) for key in wanted}
        try:
            self.update(wanted)
            yield
        finally:
            for key, raw in saved.items():
                self._config.write(key, raw)
            self._config.mark_dirty()

    def changes(self) -> dict[str, tuple[Any, Any]]:
        """``{key: (value_at_start, value_now)}`` for every key whose value differs."""
        found = {}
        for key, start in self._start.items():
            if not self._config.has_key(key):
                continue
            then = self._config.effective(key, start)
            now = self._config.effective(key)
            if values.values_differ(now, then):
                found[key] = (then, now)
        return found

    def restore(self) -> None:
        """Puts every key back as it was when this guard was created."""
        touched = False
        for key, start in self._start.items():
            if self._config.has_key(key) and not self._config.raw(key).same_as(start):
                self._config.write(key, start)
                touched = True
        if touched:
            self._config.mark_dirty()

    def __repr__(self) -> str:
        changed = ", ".join(sorted(self.changes())) or "no changes"
        return f"<ConfigGuard {self._config.name}: {changed}>"

    def _check(self, key: str) -> None:
        if isinstance(key, str) and self._config.has_key(key):
            return
        near = config_access.nearest_keys(str(key), self._config.all_keys())
        hint = f"; did you mean {' or '.join(repr(k) for k in near)}?" if near else ""
        raise ConfigKeyError(f"{key!r} is not a key of {self._config.name}{hint}")
