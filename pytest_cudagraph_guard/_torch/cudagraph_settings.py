"""The two cudagraph switches of inductor's config: reading them, turning them on, and where
(which threads) a setting holds on this torch."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from contextvars import Context
from typing import Final

from .config_access import (
    INDUCTOR_CONFIG,
    import_config,
    loaded_config,
    loaded_guarded_configs,
)
from .events import CUDAGRAPH_SWITCHES, ConfigValues, cudagraph_switches
from .faults import Loss, run_ours
from .release import release_tuple
from .values import RawEntry


def apply_cudagraph_settings(trees: bool) -> None:
    """CUDA graphs on in the calling context (process-wide on torch <= 2.11, where the caller
    restores them). Written beneath the module's attribute protocol, as a restore is, so that
    the leak guard's change counter only counts what tests do."""
    config = import_config(INDUCTOR_CONFIG)
    switches = cudagraph_switches(trees)
    keys, values = tuple(switches), tuple(switches.values())
    if config.set_in_context(keys, values):  # every marked test passes here
        return
    for key, value in switches.items():
        config.write(key, RawEntry(value, config.raw(key).default, False))
    config.mark_dirty()


def cudagraphs_on_for_now(trees: bool = True) -> Callable[[], None]:
    """``apply_cudagraph_settings(trees)``; returns the function that puts both switches back,
    in the calling context, as they were before."""
    config = import_config(INDUCTOR_CONFIG)
    saved = [(key, config.saved(key)) for key in CUDAGRAPH_SWITCHES]
    apply_cudagraph_settings(trees)

    def put_back() -> None:
        for key, raw in saved:
            config.write(key, raw)
        config.mark_dirty()

    return put_back


_ADOPTING: Final = Loss("--cudagraph-threads", "config changes made in its threads, as leaks")


def adopt_thread_overrides(contexts: Iterable[Context]) -> None:
    """From torch 2.12, where threads' config overrides die with their contexts: what threads
    that ran in copies of the calling context left set there, set here too, as if the calling
    thread had made it (so that the leak guard sees it). Ours failing loses only that."""
    finished = list(contexts)
    for config in loaded_guarded_configs():
        run_ours(_ADOPTING, config.adopt_overrides, finished)


def cudagraph_settings_here() -> ConfigValues:
    """Every cudagraph key of inductor's config (nested ones too) as the calling context sees
    it: what a compile made now compiles with."""
    config = loaded_config(INDUCTOR_CONFIG)
    if config is None:
        return {}
    return {key: config.effective(key) for key in config.cudagraph_keys()}


def cudagraph_switches_here() -> ConfigValues:
    """``triton.cudagraphs`` and ``triton.cudagraph_trees`` as the calling context sees them."""
    settings = cudagraph_settings_here()
    return {key: settings[key] for key in CUDAGRAPH_SWITCHES if key in settings}


@functools.cache
def config_is_process_wide() -> bool:
    """Whether config overrides are shared by every thread (torch <= 2.11)."""
    return import_config(INDUCTOR_CONFIG).layout != "ctxvar"


def settings_can_wait_for_import() -> bool:
    """Whether cudagraph settings may be applied when inductor's config is first imported, in
    whichever thread imports it: where config is process-wide (torch <= 2.11). From 2.12 a
    setting belongs to the thread that makes it, so it must be made in the main thread."""
    return (0, 0) < release_tuple() < (2, 12)
