"""A pytest session's share of the torch boundary's module state.

What one session noted, cached or left waiting is dropped at its end, and the notices at its
start too, so that a second session in one process (pytester in-process, IDE runners) records
what a fresh process would. What torch is patched with is reference-counted by its users (the
report's observers, the leak guard's counting, ``tls="init"`` runs) and undone by them, and the
patches' log shows only what is in effect: nothing here undoes what a session still running (an
outer one) uses.
"""

from __future__ import annotations

from . import config_access, counting, import_hooks, observe
from .faults import begin_fault_session


def begin_session() -> None:
    begin_fault_session()


def end_session() -> None:
    for end in (
        observe.end_session,
        counting.end_session,
        config_access.end_session,
        import_hooks.end_session,
        begin_fault_session,
    ):
        end()
