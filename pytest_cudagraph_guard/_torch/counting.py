"""Counting changes of config keys by swapping classes.

Every ordinary change of a config key goes through the module's ``__setattr__``/``__delattr__``
(plain assignment, SubConfigProxy, config.patch, mock.patch, monkeypatch, load_config). A
subclass of the module's own class counts them, so a guard can tell "nothing changed" in O(1).
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any, Final

from .config_access import ConfigTable
from .faults import note_missing
from .patch_table import PATCHES, PatchRow
from .patches import owner_path, swap_class

_SWAP_FAILURES: Final = (AttributeError, KeyError, TypeError, ValueError)


class _CountingState:
    """The change count, the modules counting (with their own class and users), the counting
    subclass made for each entry class, and whether a class could not be swapped."""

    __slots__ = ("alias_writes", "changes", "entry_classes", "incomplete", "modules")

    def __init__(self) -> None:
        self.changes = 0
        # "module.key" of a setting -> "module.alias" of the alias it was last written through
        self.alias_writes: dict[str, str] = {}
        self.modules: dict[int, tuple[ModuleType, type, int]] = {}
        self.entry_classes: dict[type, type] = {}
        self.incomplete = False


_STATE: Final = _CountingState()


def change_count() -> int:
    return _STATE.changes


def counts_every_change() -> bool:
    """Whether ``change_count`` sees every write: False once a class could not be swapped on
    this torch, so that "the count did not move" proves nothing."""
    return not _STATE.incomplete


def alias_written(module_name: str, key: str) -> str | None:
    """The dotted alias through which ``module_name.key`` was last written, if it was."""
    return _STATE.alias_writes.get(f"{module_name}.{key}")


def end_session() -> None:
    """A session ended: once no config module counts, the aliases last written through and a
    swap that failed are forgotten, as in a fresh process (the counting classes made are kept:
    they depend on torch's classes only)."""
    if not _STATE.modules:
        _STATE.alias_writes.clear()
        _STATE.incomplete = False


def _aliases(module: ModuleType) -> dict[str, str]:
    """``{alias key: dotted path of the setting it stands for}``."""
    config: ConfigTable = module.__dict__["_config"]
    return {k: str(e.alias) for k, e in config.items() if getattr(e, "alias", None)}


def count_changes(module: ModuleType) -> None:
    """Makes ``module`` count attribute writes; nested calls are reference-counted. Where this
    torch's classes cannot be swapped, the loss is noted and ``counts_every_change`` is False."""
    key = id(module)
    if key in _STATE.modules:
        mod, original, users = _STATE.modules[key]
        _STATE.modules[key] = (mod, original, users + 1)
        return
    try:
        _start_counting(module)
    except _SWAP_FAILURES as error:
        _STATE.incomplete = True
        stop_counting(module)
        _note_unswappable(PATCHES["counting.config_module_class"], module, error)


def _note_unswappable(row: PatchRow, owner: object, error: Exception) -> None:
    note_missing(row.loss, f"{owner_path(owner)}.{row.attribute}", f"cannot be swapped ({error})")


def _start_counting(module: ModuleType) -> None:
    key = id(module)
    original = type(module)
    bypass: Iterable[str] = module.__dict__.get("_bypass_keys", ())
    bypass_keys = frozenset(bypass)
    state = _STATE
    aliases = _aliases(module)
    prefix = f"{module.__name__}."

    def __setattr__(self: ModuleType, name: str, value: object) -> None:
        if name in bypass_keys:
            original.__setattr__(self, name, value)
            return
        state.changes += 1
        if state.alias_writes:
            state.alias_writes.pop(prefix + name, None)
        original.__setattr__(self, name, value)  # an alias writes its setting through here too
        target = aliases.get(name)
        if target is not None:
            state.alias_writes[target] = prefix + name

    def __delattr__(self: ModuleType, name: str) -> None:
        if name not in bypass_keys:
            state.changes += 1
        original.__delattr__(self, name)

    counting = _named_as(original, __setattr__=__setattr__, __delattr__=__delattr__)
    swap_class(PATCHES["counting.config_module_class"], module, counting, owner=module)
    _STATE.modules[key] = (module, original, 1)
    _count_entry_writes(module)


def stop_counting(module: ModuleType) -> None:
    key = id(module)
    if key not in _STATE.modules:
        return
    mod, original, users = _STATE.modules[key]
    if users > 1:
        _STATE.modules[key] = (mod, original, users - 1)
        return
    del _STATE.modules[key]
    swap_class(PATCHES["counting.config_module_class"], module, original, owner=module, back=True)
    _stop_entry_writes(module)


def _count_entry_writes(module: ModuleType) -> None:
    """Entries count writes too: a replaced default or ``hide`` set by hand."""
    classes = _STATE.entry_classes
    for entry in module.__dict__["_config"].values():
        cls = type(entry)
        if not hasattr(cls, "__dataclass_fields__") or cls in classes.values():
            continue
        try:
            counting = classes.get(cls)
            if counting is None:
                counting = classes[cls] = _entry_class_counting(cls)
            swap_class(PATCHES["counting.config_entry_class"], entry, counting, owner=cls)
        except _SWAP_FAILURES as error:
            _STATE.incomplete = True
            _note_unswappable(PATCHES["counting.config_entry_class"], cls, error)
            return


def _entry_class_counting(cls: type) -> type:
    state = _STATE
    parent_setattr: Any = cls.__setattr__

    def __setattr__(self: object, name: str, value: object) -> None:
        state.changes += 1
        parent_setattr(self, name, value)

    return _named_as(cls, __setattr__=__setattr__)


def _named_as(cls: type, **methods: Any) -> type:
    """A subclass of ``cls`` with ``methods``, named as ``cls`` is wherever it is shown."""
    namespace = {**methods, "__module__": cls.__module__, "__qualname__": cls.__qualname__}
    return type(cls.__name__, (cls,), namespace)


def _stop_entry_writes(module: ModuleType) -> None:
    originals = {counting: cls for cls, counting in _STATE.entry_classes.items()}
    for entry in module.__dict__["_config"].values():
        original = originals.get(type(entry))
        if original is not None:
            row = PATCHES["counting.config_entry_class"]
            swap_class(row, entry, original, owner=original, back=True)
