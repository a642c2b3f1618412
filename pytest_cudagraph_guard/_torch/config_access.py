"""Layout-independent access to torch's config modules (``torch/utils/_config_module.py``).

Config layouts of the supported releases (torch>=2.9):

- ``entry`` (to 2.11): ``module._config[key]`` is a ``_ConfigEntry`` whose ``user_override`` is a
  plain attribute, process-global.
- ``ctxvar`` (2.12+): ``user_override`` is a ``ContextVar``, so overrides are per thread/context.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from contextvars import Context, ContextVar, copy_context
from types import ModuleType
from typing import Any, Final

from .events import CUDAGRAPH_SWITCHES
from .runtime import import_quietly, import_torch
from .values import HIDDEN, UNSET, RawEntry, copy_value, is_mutable, values_differ

INDUCTOR_CONFIG: Final = "torch._inductor.config"
DYNAMO_CONFIG: Final = "torch._dynamo.config"
GUARDED_CONFIG_MODULES: Final = (INDUCTOR_CONFIG, DYNAMO_CONFIG)
# A config module's ``_config`` as torch keeps it: each key's ``_ConfigEntry``.
ConfigTable = dict[str, Any]


class ConfigAccess:
    """Layout-independent reads and writes of one torch config module's raw entries."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.name: str = module.__name__
        self._config: ConfigTable = module.__dict__["_config"]
        self.layout, self._torch_unset = _layout_of(module)
        self._cudagraph_keys: list[str] | None = None
        self._override_vars: dict[ContextVar[Any], Any] | None = None
        self._alias_keys = frozenset(
            key for key, entry in self._config.items() if getattr(entry, "alias", None)
        )

    def keys(self) -> list[str]:
        """Every key that holds its own value (aliases of other settings are left out)."""
        return [k for k in self._config if k not in self._alias_keys]

    def has_key(self, key: str) -> bool:
        return key in self._config

    def all_keys(self) -> list[str]:
        return sorted(self._config)

    def raw(self, key: str) -> RawEntry:
        entry = self._config[key]
        override = self._read_override(entry)
        return RawEntry(override, entry.default, bool(getattr(entry, "hide", False)))

    def saved(self, key: str) -> RawEntry:
        """``raw(key)`` with its mutable values copied, to put back later as it is now."""
        raw = self.raw(key)
        name = f"{self.name}.{key}"
        return RawEntry(copy_value(raw.override, name), copy_value(raw.default, name), raw.hidden)

    def snapshot(self) -> dict[str, RawEntry]:
        return {key: self.saved(key) for key in self.keys()}

    def write(self, key: str, raw: RawEntry) -> None:
        """Puts ``raw`` back under ``key``, bypassing the module's attribute protocol."""
        value = copy_value(raw.override)
        entry = self._config[key]
        stored = self._torch_unset if value is UNSET else value
        if self.layout == "ctxvar":
            entry.user_override.set(stored)
        else:
            entry.user_override = stored
        if values_differ(entry.default, raw.default):
            entry.default = copy_value(raw.default)
        if getattr(entry, "hide", raw.hidden) != raw.hidden:  # each write counts as a change
            entry.hide = raw.hidden

    def set_in_context(self, keys: tuple[str, ...], values: tuple[Any, ...]) -> bool:
        """``write`` of immutable override values, for a hot path: on the ctxvar layout, where
        none of ``keys`` is hidden, sets their overrides in the calling context and marks torch's
        caches dirty. False, with nothing set, anywhere else (use ``write``)."""
        if self.layout != "ctxvar":
            return False
        entries = [self._config[key] for key in keys]
        if any(getattr(entry, "hide", False) for entry in entries):
            return False
        for entry, value in zip(entries, values, strict=True):
            entry.user_override.set(value)
        self.mark_dirty()
        return True

    def adopt_overrides(self, contexts: Iterable[Context]) -> None:
        """On the ctxvar layout: sets in the calling context each override that one of
        ``contexts`` (copies of it, since run by threads) holds with another effect; the later
        context wins. Nothing elsewhere, where overrides are shared by every thread already."""
        if self.layout != "ctxvar":
            return
        entries = self._entries_by_override()
        here = copy_context()
        adopted = False
        for context in contexts:
            for var, there in context.items():  # only what is set there: cheap
                entry = entries.get(var)
                if entry is None or here.get(var, UNSET) is there:
                    continue
                if values_differ(self._in_effect(entry, there), self._in_effect(entry, var.get())):
                    var.set(there)
                    adopted = True
        if adopted:
            self.mark_dirty()

    def _entries_by_override(self) -> dict[ContextVar[Any], Any]:
        if self._override_vars is None:
            self._override_vars = {
                entry.user_override: entry
                for key, entry in self._config.items()
                if key not in self._alias_keys
            }
        return self._override_vars

    def _in_effect(self, entry: Any, override: Any) -> Any:
        """What an override means: torch's first read copies a mutable default into it."""
        return entry.default if override is self._torch_unset else override

    def effective(self, key: str, raw: RawEntry | None = None) -> Any:
        """The value a read of ``key`` gives, computed without a read's side effects."""
        raw = raw if raw is not None else self.raw(key)
        if raw.hidden:
            return HIDDEN
        return self._decided(key, raw)[1]

    def provenance(self, key: str) -> str | None:
        """``env-force``/``env-default`` when an environment variable decides the value."""
        return self._decided(key, self.raw(key))[0]

    def _decided(self, key: str, raw: RawEntry) -> tuple[str | None, Any]:
        """What decides the value a read of ``key`` gives (None: its default), and that value."""
        entry, unset = self._config[key], self._torch_unset
        if (forced := getattr(entry, "env_value_force", unset)) is not unset:
            return "env-force", forced
        if raw.override is not UNSET:
            return "override", raw.override
        if (env_default := getattr(entry, "env_value_default", unset)) is not unset:
            return "env-default", env_default
        return None, raw.default

    def mark_dirty(self) -> None:
        """Invalidates torch's hash and ``_get_dict`` caches after a raw write."""
        namespace = self.module.__dict__
        hash_dirty = namespace.get("_hash_dirty_var")
        if isinstance(hash_dirty, ContextVar):
            hash_dirty.set(True)
        dict_dirty = namespace.get("_get_dict_dirty_keys_var")
        if isinstance(dict_dirty, ContextVar):
            dict_dirty.set(None)
        if "_is_dirty" in namespace:
            namespace["_is_dirty"] = True

    def raw_reader(self, key: str) -> Callable[[], tuple[Any, Any]]:
        """A cheap reader of ``key``'s (override, default) as torch stores them, for hot paths."""
        entry, unset = self._config[key], self._torch_unset
        if self.layout == "ctxvar":
            var = entry.user_override
            return lambda: (UNSET if (value := var.get()) is unset else value, entry.default)
        return lambda: (
            UNSET if (value := entry.user_override) is unset else value,
            entry.default,
        )

    def cudagraph_keys(self) -> list[str]:
        """``triton.cudagraphs`` and every key whose name holds ``cudagraph``, nested ones too."""
        if self._cudagraph_keys is None:
            keys = {key for key in self.all_keys() if "cudagraph" in key}
            keys |= {key for key in CUDAGRAPH_SWITCHES if self.has_key(key)}
            self._cudagraph_keys = sorted(keys)
        return self._cudagraph_keys

    def mutable_keys(self, snapshot: dict[str, RawEntry]) -> list[str]:
        return [
            key
            for key, raw in snapshot.items()
            if (is_mutable(raw.override) and raw.override is not UNSET) or is_mutable(raw.default)
        ]

    def _read_override(self, entry: Any) -> Any:
        value = entry.user_override.get() if self.layout == "ctxvar" else entry.user_override
        return UNSET if value is self._torch_unset else value


def _layout_of(module: ModuleType) -> tuple[str, object]:
    """The module's layout, and torch's own marker of an entry without an override."""
    entry: Any = next(iter(module.__dict__["_config"].values()), None)
    if not hasattr(entry, "user_override"):  # torch before 2.6, say
        raise RuntimeError(
            f"{module.__name__}: a torch config layout this plugin does not know "
            "(it needs torch>=2.9)"
        )
    layout = "ctxvar" if isinstance(entry.user_override, ContextVar) else "entry"
    owner = import_quietly(type(entry).__module__)
    return layout, getattr(owner, "_UNSET_SENTINEL", UNSET)


_ACCESSES: Final[dict[int, ConfigAccess]] = {}  # one per config module object, by id


def end_session() -> None:
    """A session ended: the next one reads each config module afresh."""
    _ACCESSES.clear()


def access(module: ModuleType) -> ConfigAccess:
    cached = _ACCESSES.get(id(module))
    if cached is None or cached.module is not module:
        cached = _ACCESSES[id(module)] = ConfigAccess(module)
    return cached


def loaded_config(name: str) -> ConfigAccess | None:
    """The config module ``name`` if the session has imported it; never imports it."""
    module = sys.modules.get(name)
    if module is None or "_config" not in module.__dict__:
        return None
    return access(module)


def import_config(name: str) -> ConfigAccess:
    import_torch()
    return access(import_quietly(name))


def loaded_guarded_configs() -> Iterator[ConfigAccess]:
    for name in GUARDED_CONFIG_MODULES:
        found = loaded_config(name)
        if found is not None:
            yield found


def nearest_keys(wanted: str, keys: Iterable[str], count: int = 3) -> list[str]:
    import difflib

    return difflib.get_close_matches(wanted, list(keys), n=count, cutoff=0.6)
