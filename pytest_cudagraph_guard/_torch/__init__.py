"""The one place that touches torch internals and the differences between its releases.

Nothing here imports torch at module level: every function that needs torch takes it from
``sys.modules`` or imports it on demand, so that loading the plugin stays free. Every torch
attribute the plugin replaces is a row of ``patch_table.PATCHES``. Where torch is not as a row
expects, or code of ours fails inside a torch call, only that row's part stops and ``faults``
keeps one notice for it (``take_notices``), which the package delivers as a warning.

Each public name is imported from its submodule when first used (PEP 562), so that a session
loads only the parts of the boundary it needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from .config_access import (
        CUDAGRAPH_SWITCHES as CUDAGRAPH_SWITCHES,
    )
    from .config_access import (
        DYNAMO_CONFIG as DYNAMO_CONFIG,
    )
    from .config_access import (
        GUARDED_CONFIG_MODULES as GUARDED_CONFIG_MODULES,
    )
    from .config_access import (
        INDUCTOR_CONFIG as INDUCTOR_CONFIG,
    )
    from .config_access import (
        ConfigAccess as ConfigAccess,
    )
    from .config_access import (
        import_config as import_config,
    )
    from .config_access import (
        loaded_config as loaded_config,
    )
    from .config_access import (
        loaded_guarded_configs as loaded_guarded_configs,
    )
    from .config_access import (
        nearest_keys as nearest_keys,
    )
    from .counting import (
        alias_written as alias_written,
    )
    from .counting import (
        change_count as change_count,
    )
    from .counting import (
        count_changes as count_changes,
    )
    from .counting import (
        counts_every_change as counts_every_change,
    )
    from .counting import (
        stop_counting as stop_counting,
    )
    from .cudagraph_settings import (
        adopt_thread_overrides as adopt_thread_overrides,
    )
    from .cudagraph_settings import (
        apply_cudagraph_settings as apply_cudagraph_settings,
    )
    from .cudagraph_settings import (
        config_is_process_wide as config_is_process_wide,
    )
    from .cudagraph_settings import (
        cudagraph_switches_here as cudagraph_switches_here,
    )
    from .cudagraph_settings import (
        cudagraphs_on_for_now as cudagraphs_on_for_now,
    )
    from .cudagraph_settings import (
        settings_can_wait_for_import as settings_can_wait_for_import,
    )
    from .env_sources import (
        env_names as env_names,
    )
    from .env_sources import (
        env_variables_read as env_variables_read,
    )
    from .env_sources import (
        is_torch_env_memo as is_torch_env_memo,
    )
    from .events import (
        Compiled as Compiled,
    )
    from .events import (
        CompileEnded as CompileEnded,
    )
    from .events import (
        CrossThread as CrossThread,
    )
    from .events import (
        Cudagraphified as Cudagraphified,
    )
    from .events import (
        GraphOrigin as GraphOrigin,
    )
    from .events import (
        Observer as Observer,
    )
    from .events import (
        RanEarlierGraph as RanEarlierGraph,
    )
    from .events import (
        Recorded as Recorded,
    )
    from .events import (
        RecordingStarted as RecordingStarted,
    )
    from .events import (
        Replayed as Replayed,
    )
    from .events import (
        Rerecorded as Rerecorded,
    )
    from .events import (
        Skipped as Skipped,
    )
    from .events import (
        SlowPath as SlowPath,
    )
    from .events import (
        TorchEvent as TorchEvent,
    )
    from .faults import (
        Loss as Loss,
    )
    from .faults import (
        begin_fault_session as begin_fault_session,
    )
    from .faults import (
        is_stopped as is_stopped,
    )
    from .faults import (
        note_internal_error as note_internal_error,
    )
    from .faults import (
        notice_once as notice_once,
    )
    from .faults import (
        run_ours as run_ours,
    )
    from .faults import (
        take_notices as take_notices,
    )
    from .import_hooks import (
        run_after_import as run_after_import,
    )
    from .kernel_warm_up import (
        READ_ONCE_BY_CUBLAS as READ_ONCE_BY_CUBLAS,
    )
    from .kernel_warm_up import (
        forget_warm_up as forget_warm_up,
    )
    from .kernel_warm_up import (
        kernel_warm_up_steps as kernel_warm_up_steps,
    )
    from .kernel_warm_up import (
        starts_cublas as starts_cublas,
    )
    from .observe import (
        begin_test as begin_test,
    )
    from .observe import (
        skip_count as skip_count,
    )
    from .observe import (
        start_observing as start_observing,
    )
    from .observe import (
        stop_observing as stop_observing,
    )
    from .readiness import (
        serializes_captures_for_threads as serializes_captures_for_threads,
    )
    from .readiness import (
        start_thread_readiness as start_thread_readiness,
    )
    from .readiness import (
        stop_thread_readiness as stop_thread_readiness,
    )
    from .runtime import (
        TorchNotInstalled as TorchNotInstalled,
    )
    from .runtime import (
        cuda_visible as cuda_visible,
    )
    from .runtime import (
        import_quietly as import_quietly,
    )
    from .runtime import (
        import_torch as import_torch,
    )
    from .runtime import (
        release_tuple as release_tuple,
    )
    from .runtime import (
        torch_loaded as torch_loaded,
    )
    from .runtime import (
        torch_version as torch_version,
    )
    from .runtime import (
        versions as versions,
    )
    from .sessions import (
        begin_session as begin_session,
    )
    from .sessions import (
        end_session as end_session,
    )
    from .thread_names import (
        AUTOGRAD_THREAD as AUTOGRAD_THREAD,
    )
    from .thread_names import (
        NATIVE_THREAD as NATIVE_THREAD,
    )
    from .thread_names import (
        thread_label as thread_label,
    )
    from .trees import (
        creates_thread_state_lazily as creates_thread_state_lazily,
    )
    from .trees import (
        ensure_cudagraph_tls as ensure_cudagraph_tls,
    )
    from .trees import (
        fx_tracing_is_per_thread as fx_tracing_is_per_thread,
    )
    from .trees import (
        import_cudagraph_trees as import_cudagraph_trees,
    )
    from .trees import (
        release_cudagraph_tls as release_cudagraph_tls,
    )
    from .trees import (
        reset_compiled_state as reset_compiled_state,
    )
    from .values import (
        HIDDEN as HIDDEN,
    )
    from .values import (
        UNSET as UNSET,
    )
    from .values import (
        RawEntry as RawEntry,
    )
    from .values import (
        copy_value as copy_value,
    )
    from .values import (
        is_mutable as is_mutable,
    )
    from .values import (
        values_differ as values_differ,
    )

# Each public name and the submodule that defines it, imported on first use.
_EXPORTS: Final[dict[str, tuple[str, ...]]] = {
    "config_access": (
        "CUDAGRAPH_SWITCHES",
        "DYNAMO_CONFIG",
        "GUARDED_CONFIG_MODULES",
        "INDUCTOR_CONFIG",
        "ConfigAccess",
        "import_config",
        "loaded_config",
        "loaded_guarded_configs",
        "nearest_keys",
    ),
    "counting": (
        "alias_written",
        "change_count",
        "count_changes",
        "counts_every_change",
        "stop_counting",
    ),
    "cudagraph_settings": (
        "adopt_thread_overrides",
        "apply_cudagraph_settings",
        "config_is_process_wide",
        "cudagraph_switches_here",
        "cudagraphs_on_for_now",
        "settings_can_wait_for_import",
    ),
    "env_sources": (
        "env_names",
        "env_variables_read",
        "is_torch_env_memo",
    ),
    "events": (
        "Compiled",
        "CompileEnded",
        "CrossThread",
        "Cudagraphified",
        "GraphOrigin",
        "Observer",
        "RanEarlierGraph",
        "Recorded",
        "RecordingStarted",
        "Replayed",
        "Rerecorded",
        "Skipped",
        "SlowPath",
        "TorchEvent",
    ),
    "faults": (
        "Loss",
        "begin_fault_session",
        "is_stopped",
        "note_internal_error",
        "notice_once",
        "run_ours",
        "take_notices",
    ),
    "import_hooks": ("run_after_import",),
    "kernel_warm_up": (
        "READ_ONCE_BY_CUBLAS",
        "forget_warm_up",
        "kernel_warm_up_steps",
        "starts_cublas",
    ),
    "observe": (
        "begin_test",
        "skip_count",
        "start_observing",
        "stop_observing",
    ),
    "readiness": (
        "serializes_captures_for_threads",
        "start_thread_readiness",
        "stop_thread_readiness",
    ),
    "runtime": (
        "TorchNotInstalled",
        "cuda_visible",
        "import_quietly",
        "import_torch",
        "release_tuple",
        "torch_loaded",
        "torch_version",
        "versions",
    ),
    "sessions": (
        "begin_session",
        "end_session",
    ),
    "thread_names": (
        "AUTOGRAD_THREAD",
        "NATIVE_THREAD",
        "thread_label",
    ),
    "trees": (
        "creates_thread_state_lazily",
        "ensure_cudagraph_tls",
        "fx_tracing_is_per_thread",
        "import_cudagraph_trees",
        "release_cudagraph_tls",
        "reset_compiled_state",
    ),
    "values": (
        "HIDDEN",
        "UNSET",
        "RawEntry",
        "copy_value",
        "is_mutable",
        "values_differ",
    ),
}
_MODULE_OF: Final = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)  # noqa: PLE0605


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})
