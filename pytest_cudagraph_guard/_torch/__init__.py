"""The one place that touches torch internals and the differences between its releases.

Nothing here imports torch at module level: every function that needs torch takes it from
``sys.modules`` or imports it on demand, so that loading the plugin stays free. Every torch
attribute the plugin replaces is a row of ``patches.PATCHES``. Where torch is not as a row expects,
or code of ours fails inside a torch call, only that row's part stops and ``faults`` keeps one
notice for it (``take_notices``), which the package delivers as a warning.
"""

from .config_access import (
    CUDAGRAPH_SWITCHES,
    DYNAMO_CONFIG,
    GUARDED_CONFIG_MODULES,
    INDUCTOR_CONFIG,
    ConfigAccess,
    import_config,
    loaded_config,
    loaded_guarded_configs,
    nearest_keys,
)
from .counting import (
    alias_written,
    change_count,
    count_changes,
    counts_every_change,
    stop_counting,
)
from .cudagraph_settings import (
    adopt_thread_overrides,
    apply_cudagraph_settings,
    config_is_process_wide,
    cudagraph_switches_here,
    cudagraphs_on_for_now,
    settings_can_wait_for_import,
)
from .env_sources import env_names, env_variables_read, is_torch_env_memo
from .events import (
    Compiled,
    CrossThread,
    Cudagraphified,
    Observer,
    RanEarlierGraph,
    Recorded,
    Replayed,
    Rerecorded,
    Skipped,
    SlowPath,
    TorchEvent,
)
from .faults import (
    Loss,
    begin_fault_session,
    is_stopped,
    note_internal_error,
    notice_once,
    run_ours,
    take_notices,
)
from .import_hooks import run_after_import
from .observe import begin_test, skip_count, start_observing, stop_observing
from .readiness import (
    serializes_captures_for_threads,
    start_thread_readiness,
    stop_thread_readiness,
)
from .runtime import (
    TorchNotInstalled,
    cuda_visible,
    import_torch,
    release_tuple,
    torch_loaded,
    torch_version,
    versions,
)
from .sessions import begin_session, end_session
from .thread_names import AUTOGRAD_THREAD, NATIVE_THREAD, thread_label
from .trees import (
    creates_thread_state_lazily,
    ensure_cudagraph_tls,
    fx_tracing_is_per_thread,
    import_cudagraph_trees,
    release_cudagraph_tls,
    reset_compiled_state,
)
from .values import HIDDEN, UNSET, RawEntry, copy_value, is_mutable, values_differ

__all__ = [
    "AUTOGRAD_THREAD",
    "CUDAGRAPH_SWITCHES",
    "DYNAMO_CONFIG",
    "GUARDED_CONFIG_MODULES",
    "HIDDEN",
    "INDUCTOR_CONFIG",
    "NATIVE_THREAD",
    "UNSET",
    "Compiled",
    "ConfigAccess",
    "CrossThread",
    "Cudagraphified",
    "Loss",
    "Observer",
    "RanEarlierGraph",
    "RawEntry",
    "Recorded",
    "Replayed",
    "Rerecorded",
    "Skipped",
    "SlowPath",
    "TorchEvent",
    "TorchNotInstalled",
    "adopt_thread_overrides",
    "alias_written",
    "apply_cudagraph_settings",
    "begin_fault_session",
    "begin_session",
    "begin_test",
    "change_count",
    "config_is_process_wide",
    "copy_value",
    "count_changes",
    "counts_every_change",
    "creates_thread_state_lazily",
    "cuda_visible",
    "cudagraph_switches_here",
    "cudagraphs_on_for_now",
    "end_session",
    "ensure_cudagraph_tls",
    "env_names",
    "env_variables_read",
    "fx_tracing_is_per_thread",
    "import_config",
    "import_cudagraph_trees",
    "import_torch",
    "is_mutable",
    "is_stopped",
    "is_torch_env_memo",
    "loaded_config",
    "loaded_guarded_configs",
    "nearest_keys",
    "note_internal_error",
    "notice_once",
    "release_cudagraph_tls",
    "release_tuple",
    "reset_compiled_state",
    "run_after_import",
    "run_ours",
    "serializes_captures_for_threads",
    "settings_can_wait_for_import",
    "skip_count",
    "start_observing",
    "start_thread_readiness",
    "stop_counting",
    "stop_observing",
    "stop_thread_readiness",
    "take_notices",
    "thread_label",
    "torch_loaded",
    "torch_version",
    "values_differ",
    "versions",
]
