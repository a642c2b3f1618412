"""Config values as the plugin compares and keeps them: the UNSET/HIDDEN markers, copies,
differences, and ``RawEntry`` (what a key holds beneath its effective value)."""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from .faults import note_uncopyable

_IMMUTABLE_TYPES: Final = (int, float, bool, type(None), str, tuple, bytes, frozenset)


class _Sentinel:
    """A named marker value that copies to itself."""

    def __init__(self, label: str) -> None:
        self._label = label

    def __repr__(self) -> str:
        return self._label

    def __copy__(self) -> _Sentinel:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> _Sentinel:
        return self


UNSET: Final = _Sentinel("<unset>")  # no user override, in every layout
HIDDEN: Final = _Sentinel("<deleted>")  # the effective value of a key hidden by ``del``


def is_mutable(value: object) -> bool:
    return not isinstance(value, _IMMUTABLE_TYPES)


def copy_value(value: object, name: str | None = None) -> Any:
    """A deep copy of a mutable value, to compare and put back later. A value that cannot be
    copied is kept as itself: its replacement is still seen, changes made in place to it are
    not, and where ``name`` is given that is said once (``faults``)."""
    if value is UNSET or not is_mutable(value):
        return value
    import copy

    try:
        return copy.deepcopy(value)
    except Exception:
        if name is not None:
            note_uncopyable(name)
        return value


def values_differ(current: object, previous: object) -> bool:
    if current is previous:
        return False
    try:
        return bool(current != previous) or type(current) is not type(previous)
    except Exception:
        return True


class RawEntry(NamedTuple):
    """What a config key holds, beneath its effective value."""

    override: Any
    default: Any
    hidden: bool

    def same_as(self, other: RawEntry) -> bool:
        return not (
            self.hidden != other.hidden
            or values_differ(self.override, other.override)
            or values_differ(self.default, other.default)
        )
