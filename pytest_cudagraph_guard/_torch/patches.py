"""The only code that replaces torch's attributes: each replacement names its row of the table
(:mod:`.patch_table`), so the table lists the whole surface touched."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final

from .faults import note_internal_error, note_missing, run_ours
from .patch_table import PatchRow


def owner_path(owner: object) -> str:
    """A module's or class's dotted path, as rows name owners."""
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}"
    return str(getattr(owner, "__name__", type(owner).__name__))


class _AppliedLog:
    """The rows in effect, each with the owners it is applied to: what a session applied is
    forgotten as its user undoes it, so no session sees another's."""

    def __init__(self) -> None:
        self.owners: dict[str, set[str]] = {}

    def note(self, row: PatchRow, owner: object) -> None:
        self.owners.setdefault(row.id, set()).add(owner_path(owner))

    def forget(self, row: PatchRow, owner: object) -> None:
        owners = self.owners.get(row.id, set())
        owners.discard(owner_path(owner))
        if not owners:
            self.owners.pop(row.id, None)


_APPLIED: Final = _AppliedLog()


def applied_rows() -> dict[str, frozenset[str]]:
    """``{row id: owner paths}`` for every row in effect now."""
    return {row_id: frozenset(owners) for row_id, owners in _APPLIED.owners.items()}


# What ``Patches.observe`` calls with a patched call's arguments (``self`` first, for a method).
Observing = Callable[[tuple[Any, ...], dict[str, object]], None]


class Patches:
    """Attributes of torch replaced for a while, put back unless someone replaced them since.

    A row whose attribute is missing or cannot be replaced is not applied and its loss is
    noted; a failure of ``wrap`` (ours) is noted as an internal error."""

    def __init__(self) -> None:
        self._applied: list[tuple[PatchRow, object, Any, Any]] = []

    def __bool__(self) -> bool:
        return bool(self._applied)

    def apply(self, row: PatchRow, owner: object, wrap: Callable[[Any], Any]) -> bool:
        """Replaces ``owner``'s ``row.attribute`` with ``wrap(original)``; whether it did."""
        name = row.attribute
        original = _attribute(owner, name)
        replacement = _replacement(row, owner, original, wrap)
        if replacement is None:
            return False
        try:
            setattr(owner, name, replacement)
        except (AttributeError, TypeError) as error:
            note_missing(row.loss, f"{owner_path(owner)}.{name}", f"cannot be replaced ({error})")
            return False
        self._applied.append((row, owner, original, replacement))
        _APPLIED.note(row, owner)
        return True

    def observe(
        self, row: PatchRow, owner: object, observer: Observing, after: bool = False
    ) -> bool:
        """``apply`` with a replacement that calls ``observer(args, kwargs)`` before the original
        call (after it returned, where ``after``) and leaves the call as it was: ``observer`` is
        ours, what it raises is noted under the row's loss."""
        loss = row.loss

        def wrap(original: Any) -> Any:
            if after:

                @functools.wraps(original)
                def observed_after(*args: Any, **kwargs: Any) -> Any:
                    result = original(*args, **kwargs)
                    run_ours(loss, observer, args, kwargs)
                    return result

                return observed_after

            @functools.wraps(original)
            def observed(*args: Any, **kwargs: Any) -> Any:
                run_ours(loss, observer, args, kwargs)
                return original(*args, **kwargs)

            return observed

        return self.apply(row, owner, wrap)

    def undo(self) -> None:
        while self._applied:
            row, owner, original, replacement = self._applied.pop()
            if _attribute(owner, row.attribute) is replacement:
                setattr(owner, row.attribute, original)
            _APPLIED.forget(row, owner)


def _replacement(
    row: PatchRow, owner: object, original: Any, wrap: Callable[[Any], Any]
) -> Any | None:
    """``wrap(original)``; None, with the problem noted, where there is nothing to wrap or our
    wrapping fails."""
    if original is None or not callable(original):
        problem = "is missing" if original is None else "is not callable"
        note_missing(row.loss, f"{owner_path(owner)}.{row.attribute}", problem)
        return None
    try:
        return wrap(original)
    except Exception as error:
        note_internal_error(row.loss, error)
        return None


def owner_class(module: object, name: str, *rows: PatchRow) -> type | None:
    """``module``'s class ``name``, or None with each row's loss noted."""
    found = getattr(module, name, None)
    if isinstance(found, type):
        return found
    for row in rows:
        note_missing(row.loss, f"{owner_path(module)}.{name}")
    return None


def replace_for_good(row: PatchRow, module: object, wrap: Callable[[Any], Any]) -> bool:
    """Replaces a module's ``row.attribute`` with ``wrap(original)`` for the process; whether it
    did (a missing attribute is noted)."""
    replacement = _replacement(row, module, getattr(module, row.attribute, None), wrap)
    if replacement is None:
        return False
    module.__dict__[row.attribute] = replacement
    _APPLIED.note(row, module)
    return True


def swap_class(row: PatchRow, obj: object, cls: type, *, owner: object, back: bool = False) -> None:
    """Gives ``obj`` the class ``cls``: a counting subclass of its own, or its original back."""
    object.__setattr__(obj, row.attribute, cls)
    if back:
        _APPLIED.forget(row, owner)
    else:
        _APPLIED.note(row, owner)


def _attribute(owner: object, name: str) -> Any:
    """A class's own attribute (not an inherited one), or a module's."""
    try:
        return owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    except Exception:
        return None
