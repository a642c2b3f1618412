"""What torch used: the effective cudagraph settings, each with where its value comes from (the
defaults, the environment, the test, torch.compile), read through :mod:`._torch`: for the report,
the leak guard, the thread marker, ``--cudagraph-settings`` and the public
``effective_settings``; and the settings a marker turns on (:func:`switched`, for the thread
marker and a dead test process's record)."""

from __future__ import annotations

import hashlib
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol

from ._torch import release, runtime, values
from ._torch.events import cudagraph_switches
from ._torch.torch_env import EnvironStamp, environ_stamp, user_torch_env
from .core.entries import SettingEntry

if TYPE_CHECKING:
    from ._torch import config_access
    from .core.markers import SubprocessOptions, ThreadOptions

# Besides the config modules, the modules whose source names the variables torch reads.
READERS: Final = ("torch._inductor.runtime.cache_dir_utils",)
# The key in pytest's cache of inductor's settings as a process that never loaded it has them.
DEFAULTS_STORE_PREFIX: Final = "cudagraph_guard/inductor-defaults/"
# Besides torch's own variables, what inductor's config reads as its defaults are made.
ALSO_READ: Final = ("CXX", "CC", "AOT_INDUCTOR", "TRITON", "CUDA_", "HIP_")


def switched(options: ThreadOptions | SubprocessOptions) -> dict[str, bool]:
    """The settings a marker's threads or test process set: none where they keep the main
    thread's (``switches``)."""
    return cudagraph_switches(options.trees) if options.switches else {}


class Setting(NamedTuple):
    """A setting's effective value and its source: ``default``, ``env:NAME``, ``test`` (set by
    the test, a fixture or a marker) or ``compile`` (set by torch.compile options or mode)."""

    value: Any
    source: str


def effective_settings(extra_keys: Iterable[str] = ()) -> dict[str, Setting]:
    """Every cudagraph-related key of ``torch._inductor.config`` (nested ones too) as the calling
    thread sees it, with its source. Imports torch."""
    from ._torch import config_access, env_sources

    config = config_access.import_config(config_access.INDUCTOR_CONFIG)
    # Reading which variables set which key parses torch's config source: only worth it when
    # one of torch's variables is set at all.
    names = env_sources.env_names(config.name) if environ_stamp() else {}
    keys = [*config.cudagraph_keys(), *(k for k in extra_keys if config.has_key(k))]
    found = {}
    for key in dict.fromkeys(keys):
        raw = config.raw(key)
        found[key] = Setting(config.effective(key, raw), _source(config, key, raw, names))
    return found


class StoredValues:
    """Some config keys' (override, default) as torch stores them, copied at one moment: tells
    cheaply whether any of them changed since. A value that cannot be copied is kept as itself:
    its replacement is still seen."""

    def __init__(self, readers: Sequence[Callable[[], tuple[Any, Any]]]) -> None:
        self._kept = [(read, _copied(read())) for read in readers]

    def unchanged(self) -> bool:
        differ = values.values_differ
        for read, (override, default) in self._kept:
            now_override, now_default = read()
            if now_override is override and now_default is default:
                continue  # an immutable value, kept as itself: most keys, decided without a call
            if differ(now_override, override) or differ(now_default, default):
                return False
        return True


def _copied(raw: tuple[Any, Any]) -> tuple[Any, Any]:
    return (values.copy_value(raw[0]), values.copy_value(raw[1]))


class DefaultsStore(Protocol):
    """Where the settings of a process that never loaded inductor are kept between sessions:
    pytest's cache (``config.cache``)."""

    def get(self, key: str, default: Any) -> Any: ...

    def set(self, key: str, value: object) -> None: ...


class SettingsReader:
    """``effective_settings(keys)`` as the report's records hold them, read again only when a
    key's stored value or torch's environment variables changed since the last read: most tests
    change neither, and a full read (sources included) costs far more than comparing what it
    was made from.

    Where the process has not loaded inductor (its tests compiled nothing), the settings are
    inductor's defaults under torch's variables, which importing inductor would take seconds of
    every process (every xdist worker) to read: they are kept in ``store`` under the installed
    torch and the variables, and read from there by later sessions."""

    def __init__(self, store: DefaultsStore | None = None) -> None:
        self._store = store
        # The defaults last read from the store, torch's variables they were read under, and
        # the store's key for them.
        self._stored: tuple[EnvironStamp, str, dict[str, SettingEntry] | None] | None = None
        self._config: config_access.ConfigAccess | None = None
        self._keys: list[str] = []
        self._made_from: StoredValues | None = None
        self._stamp: EnvironStamp = []
        self._record: dict[str, SettingEntry] = {}

    def read(self, extra_keys: Iterable[str] = ()) -> dict[str, SettingEntry]:
        from ._torch import config_access

        extra_keys = list(extra_keys)
        config = config_access.loaded_config(config_access.INDUCTOR_CONFIG)
        defaults_key = None
        if config is None:
            stored = self._defaults_stored(extra_keys)
            if stored is not None:
                return dict(stored)
            # The key looked up, not one taken after the import: inductor's import sets a
            # variable of its own (TORCHINDUCTOR_CACHE_DIR), which the next session's lookup lacks.
            defaults_key = self._stored[1] if self._stored is not None else None
            config = config_access.import_config(config_access.INDUCTOR_CONFIG)
        keys = [*config.cudagraph_keys(), *(k for k in extra_keys if config.has_key(k))]
        if config is not self._config or keys != self._keys:
            self._config, self._keys, self._made_from = config, keys, None
        if not self._unchanged():
            found = effective_settings(extra_keys).items()
            self._record = {k: SettingEntry(jsonable(s.value), s.source) for k, s in found}
            self._made_from = StoredValues([config.raw_reader(key) for key in keys])
            self._stamp = environ_stamp()
        if defaults_key is not None and self._store is not None:
            with warnings.catch_warnings():  # pytest's own, where its cache cannot be written
                warnings.simplefilter("ignore")
                # As [key, value, source] rows: pytest's cache sorts a mapping's keys.
                rows = [[k, e.value, e.source] for k, e in self._record.items()]
                self._store.set(defaults_key, rows)
        return dict(self._record)

    def _unchanged(self) -> bool:
        made_from = self._made_from
        return made_from is not None and environ_stamp() == self._stamp and made_from.unchanged()

    def _defaults_stored(self, extra_keys: list[str]) -> dict[str, SettingEntry] | None:
        """Inductor's defaults under torch's variables now, as the store keeps them: looked up
        again only when those variables changed (a read per test phase costs a stamp)."""
        if self._store is None or "torch" not in sys.modules:
            return None
        stamp = environ_stamp()
        if self._stored is None or self._stored[0] != stamp:
            key = _defaults_key(extra_keys)
            stored = self._store.get(key, None)
            rows = stored if isinstance(stored, list) else []
            found = {
                str(row[0]): SettingEntry(row[1], str(row[2]))
                for row in rows
                if isinstance(row, list) and len(row) == _ROW_LENGTH
            }
            self._stored = (stamp, key, found or None)
        return self._stored[2]


def _defaults_key(extra_keys: list[str]) -> str:
    """The store's key for inductor's defaults under the installed torch and the variables its
    config reads now."""
    torch = sys.modules.get("torch")
    made_by = (getattr(torch, "__version__", ""), getattr(torch, "__file__", ""))
    also_read = sorted((k, v) for k, v in os.environ.items() if k.startswith(ALSO_READ))
    made_from = (made_by, sorted(environ_stamp()), also_read, extra_keys)
    return f"{DEFAULTS_STORE_PREFIX}{hashlib.sha256(repr(made_from).encode()).hexdigest()[:32]}"


_ROW_LENGTH: Final = 3


def _source(
    config: config_access.ConfigAccess, key: str, raw: values.RawEntry, names: dict[str, list[str]]
) -> str:
    if raw.hidden:
        return "test"
    provenance = config.provenance(key)
    if provenance == "override" and not _copy_of_default(raw):
        return "test"
    for name in names.get(key, []):
        if name in os.environ and (
            provenance in ("env-force", "env-default") or _env_value(name) == raw.default
        ):
            return f"env:{name}"
    return "default"


def default_entry(key: str) -> SettingEntry | None:
    """A key of inductor's config as it would be had no test set it: its default, with the
    variable that decided it where one did. None where the key is not there."""
    from ._torch import config_access, env_sources

    config = config_access.loaded_config(config_access.INDUCTOR_CONFIG)
    if config is None or not config.has_key(key):
        return None
    value = config.effective(key, values.RawEntry(values.UNSET, config.raw(key).default, False))
    names = env_sources.env_names(config.name) if environ_stamp() else {}
    source = next((f"env:{name}" for name in names.get(key, []) if name in os.environ), None)
    return SettingEntry(jsonable(value), source or "default")


def _copy_of_default(raw: values.RawEntry) -> bool:
    """torch copies a list/dict/set default into the override when it is first read."""
    return values.is_mutable(raw.default) and not values.values_differ(raw.override, raw.default)


def _env_value(name: str) -> Any:
    text = os.environ.get(name)
    return {"1": True, "0": False}.get(text or "", text)


def jsonable(value: Any) -> Any:
    """A builtin-types form of a config value, for records that cross processes."""
    if value is values.HIDDEN or value is values.UNSET:
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return repr(value)


def env_read_by_torch() -> dict[str, str | None]:
    """Each relevant variable that the user set (not torch itself: its default cache folder),
    with the module of this torch that reads it (None where this torch reads no such
    variable)."""
    import sys

    from ._torch import config_access, env_sources

    readers: dict[str, str] = {}
    for name in (*config_access.GUARDED_CONFIG_MODULES, *READERS):
        if name in sys.modules:
            readers.update(dict.fromkeys(env_sources.env_variables_read(name), name))
    return {name: readers.get(name) for name in user_torch_env()}


def print_settings() -> None:
    """``pytest --cudagraph-settings``: what this process would compile with, and why."""
    if not runtime.torch_installed():
        print("torch is not installed: no cudagraph settings to show")
        return
    from ._torch import config_access, trees

    runtime.import_quietly(config_access.DYNAMO_CONFIG)
    settings = effective_settings()
    width = max(len(key) for key in settings)
    print("cudagraph settings of torch._inductor.config (value, source):")
    for key, setting in settings.items():
        print(f"  {key:<{width}}  {setting.value!r:<12}  {setting.source}")
    print("environment variables:")
    read = env_read_by_torch()
    if not read:
        print("  (none of TORCHINDUCTOR_*, TORCHDYNAMO_*, TORCH_COMPILE* is set)")
    for name, value in user_torch_env().items():
        reader = read.get(name)
        note = f"read by {reader}" if reader else "not read by this torch release"
        print(f"  {name}={value}  ({note})")
    versions = release.versions()
    print("versions:")
    for key in ("python", "torch", "triton", "cuda", "driver"):
        print(f"  {key}: {getattr(versions, key) or '-'}")
    print(f"GPUs: {', '.join(versions.gpus) or 'none visible'}")
    trees_module = trees.import_cudagraph_trees()
    lazily = trees.creates_thread_state_lazily(trees_module)
    print(
        "CUDAGraph Trees thread state: "
        + (
            "created by torch itself in any thread (torch >= 2.13)"
            if lazily
            else "created only in the main thread and autograd's threads: call "
            "ensure_cudagraph_tls() in other threads, or cudagraph_thread(tls='init')"
        )
    )
