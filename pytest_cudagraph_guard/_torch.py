"""The one place that touches torch internals and the differences between its releases.

Nothing here imports torch at module level: every function that needs torch takes it from
``sys.modules`` or imports it on demand, so that loading the plugin stays free.

Config layouts, by release (see ``torch/utils/_config_module.py``):

- ``plain`` (2.1-2.5): ``module._config[key]`` holds the value, ``module._default[key]``
  the default;
  ``del config.key`` removes the key from ``_config``.
- ``entry`` (2.6-2.11): ``module._config[key]`` is a ``_ConfigEntry`` whose ``user_override`` is a
  plain attribute, process-global.
- ``ctxvar`` (2.12+): ``user_override`` is a ``ContextVar``, so overrides are per thread/context.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from types import ModuleType
from typing import Any, Final, NamedTuple

INDUCTOR_CONFIG: Final = "torch._inductor.config"
DYNAMO_CONFIG: Final = "torch._dynamo.config"
GUARDED_CONFIG_MODULES: Final = (INDUCTOR_CONFIG, DYNAMO_CONFIG)
CUDAGRAPH_SWITCHES: Final = ("triton.cudagraphs", "triton.cudagraph_trees")

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


class TorchNotInstalled(ImportError):
    """Raised when a feature needs torch and it cannot be imported."""


def torch_loaded() -> bool:
    """Whether the test session has imported torch already (no import is attempted)."""
    return sys.modules.get("torch") is not None


def import_torch() -> ModuleType:
    try:
        import torch
    except ImportError as exc:
        raise TorchNotInstalled("torch is not installed") from exc
    return torch


def torch_version() -> str | None:
    torch = sys.modules.get("torch")
    return None if torch is None else str(getattr(torch, "__version__", "unknown"))


def release_tuple(version: str | None = None) -> tuple[int, int]:
    """(major, minor) of the installed torch, from ``torch.__version__``."""
    text = version if version is not None else torch_version()
    if not text:
        return (0, 0)
    parts = text.split("+")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return (0, 0)


def is_mutable(value: object) -> bool:
    return not isinstance(value, _IMMUTABLE_TYPES)


def copy_value(value: object) -> Any:
    if value is UNSET or not is_mutable(value):
        return value
    import copy

    try:
        return copy.deepcopy(value)
    except Exception:
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


class ConfigAccess:
    """Layout-independent reads and writes of one torch config module's raw entries."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.name: str = module.__name__
        self._config: dict[str, Any] = module.__dict__["_config"]
        self.layout = _layout_of(module)
        self._torch_unset: object = _torch_unset_sentinel(module, self.layout)
        self._pristine_keys = tuple(self._config)
        self._cudagraph_keys: list[str] | None = None
        self._alias_keys = frozenset(
            key for key, entry in self._config.items() if getattr(entry, "alias", None)
        )

    def keys(self) -> list[str]:
        """Every key that holds its own value (aliases of other settings are left out)."""
        if self.layout == "plain":
            return list(self._pristine_keys)
        return [k for k in self._config if k not in self._alias_keys]

    def has_key(self, key: str) -> bool:
        return key in self._config or key in self._pristine_keys

    def all_keys(self) -> list[str]:
        return sorted(set(self._config) | set(self._pristine_keys))

    def raw(self, key: str) -> RawEntry:
        if self.layout == "plain":
            defaults: dict[str, Any] = self.module.__dict__.get("_default", {})
            default = defaults.get(key)
            if key not in self._config:
                return RawEntry(UNSET, default, True)
            value = self._config[key]
            override = UNSET if value is default else value
            return RawEntry(override, default, False)
        entry = self._config[key]
        override = self._read_override(entry)
        return RawEntry(override, entry.default, bool(getattr(entry, "hide", False)))

    def saved(self, key: str) -> RawEntry:
        """``raw(key)`` with its mutable values copied, to put back later as it is now."""
        raw = self.raw(key)
        return RawEntry(copy_value(raw.override), copy_value(raw.default), raw.hidden)

    def snapshot(self) -> dict[str, RawEntry]:
        return {key: self.saved(key) for key in self.keys()}

    def write(self, key: str, raw: RawEntry) -> None:
        """Puts ``raw`` back under ``key``, bypassing the module's attribute protocol."""
        value = copy_value(raw.override)
        if self.layout == "plain":
            if raw.hidden:
                self._config.pop(key, None)
            else:
                self._config[key] = raw.default if value is UNSET else value
            return
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

    def effective(self, key: str, raw: RawEntry | None = None) -> Any:
        """The value a read of ``key`` gives, computed without a read's side effects."""
        raw = raw if raw is not None else self.raw(key)
        if raw.hidden:
            return HIDDEN
        if self.layout == "plain":
            return raw.default if raw.override is UNSET else raw.override
        entry = self._config[key]
        forced = getattr(entry, "env_value_force", self._torch_unset)
        if forced is not self._torch_unset:
            return forced
        if raw.override is not UNSET:
            return raw.override
        env_default = getattr(entry, "env_value_default", self._torch_unset)
        if env_default is not self._torch_unset:
            return env_default
        return raw.default

    def provenance(self, key: str) -> str | None:
        """``env-force``/``env-default`` when an environment variable decides the value."""
        if self.layout == "plain":
            return None
        entry = self._config[key]
        if getattr(entry, "env_value_force", self._torch_unset) is not self._torch_unset:
            return "env-force"
        if self._read_override(entry) is not UNSET:
            return "override"
        if getattr(entry, "env_value_default", self._torch_unset) is not self._torch_unset:
            return "env-default"
        return None

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

    def defaults_vector(self) -> list[Any]:
        """Every default object, where their writes are not counted (2.1-2.5: a plain dict)."""
        if self.layout == "plain":
            return list(self.module.__dict__.get("_default", {}).values())
        return []

    def raw_reader(self, key: str) -> Callable[[], tuple[Any, Any]]:
        """A cheap reader of ``key``'s (override, default) as torch stores them, for hot paths."""
        if self.layout == "plain":
            values, defaults = self._config, self.module.__dict__.get("_default", {})
            return lambda: (values.get(key), defaults.get(key))
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


def _layout_of(module: ModuleType) -> str:
    for entry in module.__dict__["_config"].values():
        if not hasattr(entry, "user_override"):
            return "plain"
        return "ctxvar" if isinstance(entry.user_override, ContextVar) else "entry"
    return "plain"


def _torch_unset_sentinel(module: ModuleType, layout: str) -> object:
    if layout == "plain":
        return UNSET
    entry = next(iter(module.__dict__["_config"].values()))
    owner = importlib.import_module(type(entry).__module__)
    return getattr(owner, "_UNSET_SENTINEL", UNSET)


_ACCESS_CACHE: dict[int, ConfigAccess] = {}


def access(module: ModuleType) -> ConfigAccess:
    cached = _ACCESS_CACHE.get(id(module))
    if cached is None or cached.module is not module:
        cached = ConfigAccess(module)
        _ACCESS_CACHE[id(module)] = cached
    return cached


def loaded_config(name: str) -> ConfigAccess | None:
    """The config module ``name`` if the session has imported it; never imports it."""
    module = sys.modules.get(name)
    if module is None or "_config" not in module.__dict__:
        return None
    return access(module)


def import_config(name: str) -> ConfigAccess:
    import_torch()
    return access(importlib.import_module(name))


def loaded_guarded_configs() -> Iterator[ConfigAccess]:
    for name in GUARDED_CONFIG_MODULES:
        found = loaded_config(name)
        if found is not None:
            yield found


def is_torch_env_memo(key: str, before: str | None, after: str | None) -> bool:
    """Whether torch itself wrote ``key``: ``cache_dir()`` stores its resolved default there."""
    if key != "TORCHINDUCTOR_CACHE_DIR" or before is not None or after is None:
        return False
    if not torch_loaded():
        return False
    try:
        utils = importlib.import_module("torch._inductor.runtime.cache_dir_utils")
        return bool(os.path.abspath(utils.default_cache_dir()) == after)
    except Exception:
        return False


# --- change counting -----------------------------------------------------------------------
# Every ordinary change of a config key goes through the module's __setattr__/__delattr__
# (plain assignment, SubConfigProxy, config.patch, mock.patch, monkeypatch, load_config). A
# subclass of the module's own class counts them, so a guard can tell "nothing changed" in O(1).

_change_count = [0]
_counted_modules: dict[int, tuple[ModuleType, type, int]] = {}


def change_count() -> int:
    return _change_count[0]


def count_changes(module: ModuleType) -> None:
    """Makes ``module`` count attribute writes; nested calls are reference-counted."""
    key = id(module)
    if key in _counted_modules:
        mod, original, users = _counted_modules[key]
        _counted_modules[key] = (mod, original, users + 1)
        return
    original = type(module)
    bypass: Iterable[str] = module.__dict__.get("_bypass_keys", ())
    bypass_keys = frozenset(bypass)
    counter = _change_count

    def __setattr__(self: ModuleType, name: str, value: object) -> None:
        if name not in bypass_keys:
            counter[0] += 1
        original.__setattr__(self, name, value)

    def __delattr__(self: ModuleType, name: str) -> None:
        if name not in bypass_keys:
            counter[0] += 1
        original.__delattr__(self, name)

    counting = type(
        original.__name__,
        (original,),
        {
            "__setattr__": __setattr__,
            "__delattr__": __delattr__,
            "__module__": original.__module__,
            "__qualname__": original.__qualname__,
        },
    )
    object.__setattr__(module, "__class__", counting)
    _counted_modules[key] = (module, original, 1)
    _count_entry_writes(module)


def _count_entry_writes(module: ModuleType) -> None:
    """Entries (2.6+) count writes too: a replaced default or ``hide`` set by hand."""
    for entry in module.__dict__["_config"].values():
        cls = type(entry)
        if not hasattr(cls, "__dataclass_fields__") or cls in _counting_entry_classes.values():
            continue
        counting = _counting_entry_classes.get(cls)
        if counting is None:
            counting = _counting_entry_classes[cls] = _entry_class_counting(cls)
        object.__setattr__(entry, "__class__", counting)


def _entry_class_counting(cls: type) -> type:
    counter = _change_count
    parent_setattr: Any = cls.__setattr__

    def __setattr__(self: object, name: str, value: object) -> None:
        counter[0] += 1
        parent_setattr(self, name, value)

    return type(
        cls.__name__,
        (cls,),
        {
            "__setattr__": __setattr__,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
        },
    )


def _stop_entry_writes(module: ModuleType) -> None:
    originals = {counting: cls for cls, counting in _counting_entry_classes.items()}
    for entry in module.__dict__["_config"].values():
        original = originals.get(type(entry))
        if original is not None:
            object.__setattr__(entry, "__class__", original)


_counting_entry_classes: dict[type, type] = {}


def stop_counting(module: ModuleType) -> None:
    key = id(module)
    if key not in _counted_modules:
        return
    mod, original, users = _counted_modules[key]
    if users > 1:
        _counted_modules[key] = (mod, original, users - 1)
        return
    del _counted_modules[key]
    object.__setattr__(module, "__class__", original)
    _stop_entry_writes(module)


def nearest_keys(wanted: str, keys: Iterable[str], count: int = 3) -> list[str]:
    import difflib

    return difflib.get_close_matches(wanted, list(keys), n=count, cutoff=0.6)


# --- compiled state --------------------------------------------------------------------------

CUDAGRAPH_TREES: Final = "torch._inductor.cudagraph_trees"
TLS_KEYS: Final = ("tree_manager_containers", "tree_manager_locks")


def has_cudagraph_tls() -> bool:
    """Whether the calling thread has CUDAGraph Trees state (never creates it)."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch._C._is_key_in_tls(TLS_KEYS[0]))


def reset_cudagraph_trees_here() -> None:
    """Resets the calling thread's cudagraph trees, where this thread has any."""
    trees = sys.modules.get(CUDAGRAPH_TREES)
    if trees is not None and has_cudagraph_tls():
        trees.reset_cudagraph_trees()


def reset_compiled_state() -> None:
    """``torch._dynamo.reset()`` and the calling thread's cudagraph trees."""
    import_torch()
    importlib.import_module("torch._dynamo").reset()
    reset_cudagraph_trees_here()


# --- CUDAGraph Trees thread state, and capture serialization for torch < 2.13 ---------------
# torch 2.13 (pytorch PR #184357) creates the per-thread state lazily in ``get_obj`` and takes a
# module-level ``graph_capture_lock`` around tree-manager creation, warm-up and capture. Before
# 2.13 only the thread that imported ``cudagraph_trees`` (and autograd's threads, which copy it)
# had the state, and captures in several threads could overlap.


def import_cudagraph_trees() -> ModuleType:
    """``torch._inductor.cudagraph_trees``. Its module-level code gives the importing thread the
    per-thread state; where that is not the main thread and this torch is older than 2.13, the
    main thread is given its state the first time it needs it, as 2.13 would."""
    import_torch()
    first_import = CUDAGRAPH_TREES not in sys.modules
    trees = importlib.import_module(CUDAGRAPH_TREES)
    in_worker = threading.current_thread() is not threading.main_thread()
    if first_import and in_worker and not creates_thread_state_lazily(trees):
        _give_main_thread_its_state_lazily(trees)
    return trees


def _give_main_thread_its_state_lazily(trees: ModuleType) -> None:
    original_get_obj = trees.get_obj
    main = threading.main_thread()
    tls = sys.modules["torch"]._C

    def get_obj(local: Any, attr_name: str) -> Any:
        if (
            threading.current_thread() is main
            and not hasattr(local, attr_name)
            and not tls._is_key_in_tls(attr_name)
        ):
            ensure_cudagraph_tls()
        return original_get_obj(local, attr_name)

    get_obj.__wrapped__ = original_get_obj  # type: ignore[attr-defined]
    trees.__dict__["get_obj"] = get_obj


def creates_thread_state_lazily(trees: ModuleType) -> bool:
    """Whether this torch's ``get_obj`` creates missing thread state (2.13+)."""
    return hasattr(trees, "_initialize_tls")


def fx_tracing_is_per_thread() -> bool:
    """Whether FX's symbolic-tracing flag is per thread (2.14+), so that one thread's tracing
    cannot fail another thread's compiled call."""
    tracing = sys.modules.get("torch.fx._symbolic_trace")
    return tracing is not None and hasattr(tracing, "_is_fx_tracing_tls")


def serializes_captures(trees: ModuleType) -> bool:
    """Whether this torch takes ``graph_capture_lock`` around warm-up and capture (2.13+)."""
    return hasattr(trees, "graph_capture_lock")


def ensure_cudagraph_tls() -> bool:
    """Makes CUDAGraph Trees usable in the calling thread; True if state had to be created.

    The same as torch 2.13's ``_initialize_tls``: a dict of tree managers and a dict of locks,
    kept on the module's ``threading.local`` and stashed in torch's C++ thread-local objects so
    that autograd's threads receive them. State that autograd propagated is never replaced.
    """
    trees = import_cudagraph_trees()
    stash = sys.modules["torch"]._C
    local = trees.local
    created = False
    if not (hasattr(local, TLS_KEYS[0]) and hasattr(local, TLS_KEYS[1])):
        if all(stash._is_key_in_tls(key) for key in TLS_KEYS):
            return False
        from collections import defaultdict

        local.tree_manager_containers = {}
        local.tree_manager_locks = defaultdict(threading.Lock)
        created = True
    for key in TLS_KEYS:
        if not stash._is_key_in_tls(key):
            stash._stash_obj_in_tls(key, getattr(local, key))
    return created


_release_lock = threading.Lock()


def release_cudagraph_tls() -> None:
    """Frees the calling thread's tree managers (and, on 2.13+, its stashed state).

    ``reset_cudagraph_trees`` ends by turning torch's process-wide cached-tensor switch off, as
    if no tree manager were left, and the shutdown of another thread's manager then fails its
    internal assert; so releases take turns and leave the switch on for the managers of other
    threads.
    """
    trees = sys.modules.get(CUDAGRAPH_TREES)
    if trees is None or not has_cudagraph_tls():
        return
    with _release_lock:
        trees._set_cached_tensors_enabled(True)
        try:
            trees.reset_cudagraph_trees()
        finally:
            trees._set_cached_tensors_enabled(True)
    remove = getattr(sys.modules["torch"]._C, "_remove_obj_from_tls", None)
    if remove is not None:
        for key in TLS_KEYS:
            remove(key)


# What ``tls="init"`` adds for the duration of a run, reference-counted: on torch < 2.13 one
# process-wide lock around tree-manager creation, warm-up and capture, where 2.13 takes
# ``graph_capture_lock``; and, on every release, dynamo's "FX-traces a compiled function" check
# made per thread. That check reads ``torch.fx``'s tracing flag, process-wide before 2.14: while one
# thread traces (AOT autograd, during its compile), a compiled call in any other thread raises
# "Detected that you are using FX to symbolically trace a dynamo-optimized function". Functions
# that ``torch.compile`` wrapped before the run keep the check they captured then.


class _Patches:
    """Attributes of torch replaced for a while, put back unless someone replaced them since."""

    def __init__(self) -> None:
        self._applied: list[tuple[object, str, Any, Any]] = []

    def __bool__(self) -> bool:
        return bool(self._applied)

    def apply(self, owner: object, name: str, wrap: Callable[[Any], Any]) -> None:
        original = _attribute(owner, name)
        if original is None or not callable(original):
            return
        replacement = wrap(original)
        self._applied.append((owner, name, original, replacement))
        setattr(owner, name, replacement)

    def undo(self) -> None:
        while self._applied:
            owner, name, original, replacement = self._applied.pop()
            if _attribute(owner, name) is replacement:
                setattr(owner, name, original)


def _attribute(owner: object, name: str) -> Any:
    """A class's own attribute (not an inherited one), or a module's."""
    return owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)


_capture_lock = threading.RLock()
_readiness_users = [0]
_SERIALIZED_METHODS: Final = ("__init__", "run_eager", "record_function")
_readiness_patches = _Patches()


def _locked(method: Any) -> Any:
    @functools.wraps(method)
    def serialized(*args: Any, **kwargs: Any) -> Any:
        with _capture_lock:
            return method(*args, **kwargs)

    return serialized


def _per_thread(is_fx_symbolic_tracing: Any, trace_code: Any) -> Any:
    """The check, true only where the calling thread itself is inside ``Tracer.trace``."""

    @functools.wraps(is_fx_symbolic_tracing)
    def in_this_thread() -> bool:
        if not is_fx_symbolic_tracing():
            return False
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code is trace_code:
                return True
            frame = frame.f_back  # type: ignore[assignment]
        return False

    return in_this_thread


def start_thread_readiness() -> None:
    """Applies what ``tls="init"`` adds to torch (see above); a no-op for nested users."""
    trees = import_cudagraph_trees()
    _readiness_users[0] += 1
    if _readiness_users[0] > 1:
        return
    if not serializes_captures(trees):
        for name in _SERIALIZED_METHODS:
            _readiness_patches.apply(trees.CUDAGraphTreeManager, name, _locked)
    tracing = importlib.import_module("torch.fx._symbolic_trace")
    trace_code = inspect.unwrap(tracing.Tracer.trace).__code__
    _readiness_patches.apply(
        tracing, "is_fx_symbolic_tracing", lambda check: _per_thread(check, trace_code)
    )


def stop_thread_readiness() -> None:
    if _readiness_users[0] == 0:
        return
    _readiness_users[0] -= 1
    if _readiness_users[0] == 0:
        _readiness_patches.undo()


def cuda_visible() -> bool:
    """Whether a CUDA device is visible; asks NVML first where torch can."""
    torch = import_torch()
    if not torch.cuda._is_compiled():
        return False
    return bool(torch.cuda.device_count() > 0)


def cuda_version() -> str | None:
    torch = sys.modules.get("torch")
    return None if torch is None else getattr(torch.version, "cuda", None)


# --- cudagraph settings -------------------------------------------------------------------------


def apply_cudagraph_settings(trees: bool) -> None:
    """CUDA graphs on in the calling context (process-wide on torch <= 2.11, where the caller
    restores them). Written beneath the module's attribute protocol, as a restore is, so that
    the leak guard's change counter only counts what tests do."""
    config = import_config(INDUCTOR_CONFIG)
    for key, value in zip(CUDAGRAPH_SWITCHES, (True, trees), strict=True):
        config.write(key, RawEntry(value, config.raw(key).default, False))
    config.mark_dirty()


def settings_can_wait_for_import() -> bool:
    """Whether cudagraph settings may be applied when inductor's config is first imported, in
    whichever thread imports it: where config is process-wide (torch <= 2.11). From 2.12 a
    setting belongs to the thread that makes it, so it must be made in the main thread."""
    return (0, 0) < release_tuple() < (2, 12)


def run_after_import(name: str, action: Callable[[], None]) -> bool:
    """Arranges for ``action`` to run as soon as module ``name`` has been executed, before the
    importer gets it; False, doing nothing, if ``name`` is imported already."""
    if name in sys.modules:
        return False
    sys.meta_path.insert(0, _AfterImport(name, action))
    return True


class _AfterImport:
    """A one-time ``sys.meta_path`` finder: runs ``action`` right after module ``name`` is
    executed, leaving the finding and loading to the finders behind it."""

    def __init__(self, name: str, action: Callable[[], None]) -> None:
        self.name = name
        self.action = action

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        spec = _spec_without(self, fullname)
        sys.meta_path.remove(self)
        if spec is not None:
            _run_after_exec(spec, lambda module: self.action())
        return spec


def _spec_without(finder: Any, name: str) -> Any:
    """``name``'s spec as the finders other than ``finder`` find it."""
    import importlib.util

    sys.meta_path.remove(finder)
    try:
        return importlib.util.find_spec(name)
    finally:
        sys.meta_path.insert(0, finder)


def _run_after_exec(spec: Any, action: Callable[[ModuleType], None]) -> None:
    """Makes ``spec``'s loader call ``action(module)`` once it has executed the module, then
    leaves the loader as it was."""
    loader = spec.loader
    if loader is None or not hasattr(loader, "exec_module"):
        return
    exec_module = loader.exec_module

    def exec_then_act(module: ModuleType) -> None:
        del loader.exec_module
        exec_module(module)
        action(module)

    loader.exec_module = exec_then_act


def config_is_process_wide() -> bool:
    """Whether config overrides are shared by every thread (torch <= 2.11)."""
    return import_config(INDUCTOR_CONFIG).layout != "ctxvar"


# --- where a setting's value comes from ------------------------------------------------------

ENV_NAME_PREFIXES: Final = ("TORCHINDUCTOR_", "TORCHDYNAMO_", "TORCH_")


@functools.cache
def _source_tree(module_name: str) -> ast.Module:
    """A torch module's parsed source, once per module (empty where it cannot be read)."""
    try:
        return ast.parse(inspect.getsource(sys.modules[module_name]))
    except (KeyError, OSError, TypeError, SyntaxError):
        return ast.Module(body=[], type_ignores=[])


def _variable_names(node: ast.AST) -> list[str]:
    return [
        leaf.value
        for leaf in ast.walk(node)
        if isinstance(leaf, ast.Constant)
        and isinstance(leaf.value, str)
        and leaf.value.startswith(ENV_NAME_PREFIXES)
    ]


@functools.cache
def _env_names_by_key(module_name: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
                continue
            target, value = _assignment(node)
            if target is not None and value is not None and (names := _variable_names(value)):
                found[prefix + target] = names

    visit(_source_tree(module_name).body, "")
    return found


def env_names(config: ConfigAccess) -> dict[str, list[str]]:
    """``{dotted key: [environment variables]}`` that torch reads for a key, found in the config
    module's source: ``Config(env_name_default=..., env_name_force=...)`` and the import-time
    ``os.environ.get("NAME") == "1"`` defaults."""
    return _env_names_by_key(config.name)


@functools.cache
def env_variables_read(module_name: str) -> frozenset[str]:
    """Every ``TORCHINDUCTOR_*``/``TORCHDYNAMO_*``/``TORCH_*`` name in a module's source."""
    return frozenset(_variable_names(_source_tree(module_name)))


def _assignment(node: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        return (target.id if isinstance(target, ast.Name) else None), node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id, node.value
    return None, None


# --- observing what torch does with CUDA graphs ----------------------------------------------
# Wrappers around the functions that every compile and capture goes through, installed only
# while a report is wanted. Each calls back with plain values; the wrapped call is unchanged.

Observer = Callable[[str, dict[str, Any]], None]
_observers: list[Observer] = []
_observation_patches = _Patches()
_in_manager_init = threading.local()


def _emit(event: str, data: dict[str, Any]) -> None:
    data["thread"] = threading.current_thread().name
    for observer in list(_observers):
        observer(event, data)


def _options_of(config_patches: Any) -> dict[str, Any]:
    if not isinstance(config_patches, dict):
        return {}
    return {str(k): v for k, v in config_patches.items() if isinstance(v, (bool, int, float, str))}


def _observed_compile_fx(compile_fx: Any) -> Any:
    @functools.wraps(compile_fx)
    def compile_fx_observed(*args: Any, **kwargs: Any) -> Any:
        options = _options_of(kwargs.get("config_patches"))
        if options or not kwargs.get("inner_compile"):
            _emit("compile", {"options": options, "settings": cudagraph_switches_here()})
        return compile_fx(*args, **kwargs)

    return compile_fx_observed


def _observed_cudagraphify(cudagraphify: Any) -> Any:
    @functools.wraps(cudagraphify)
    def cudagraphify_observed(*args: Any, **kwargs: Any) -> Any:
        _emit("cudagraphify", {"trees": cudagraph_switches_here().get(CUDAGRAPH_SWITCHES[1])})
        return cudagraphify(*args, **kwargs)

    return cudagraphify_observed


_skipped_graphs: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def _observed_graph_method(method: Any) -> Any:
    """``CompiledFxGraph.__init__`` and ``post_compile`` (a graph loaded from the FX graph
    cache) count cudagraph skips, some without logging them; the reason is on the graph."""

    @functools.wraps(method)
    def method_observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        before = skip_count()
        result = method(self, *args, **kwargs)
        if skip_count() > before and _skipped_graphs.get(id(self)) is not self:
            _skipped_graphs[id(self)] = self  # torch may count one graph's skip twice
            reason = getattr(self, "disabled_cudagraphs_reason", None) or "unknown"
            if not str(reason).startswith("skipping cudagraphs"):
                reason = f"skipping cudagraphs due to {reason}"
            _emit("skip", {"reason": str(reason)})
        return result

    return method_observed


def _observed_manager_init(init: Any) -> Any:
    @functools.wraps(init)
    def init_observed(*args: Any, **kwargs: Any) -> None:
        _in_manager_init.active = True  # its empty pool-initialising capture is not a recording
        try:
            init(*args, **kwargs)
        finally:
            _in_manager_init.active = False

    return init_observed


def _observed_capture_end(capture_end: Any) -> Any:
    @functools.wraps(capture_end)
    def capture_end_observed(*args: Any, **kwargs: Any) -> Any:
        result = capture_end(*args, **kwargs)
        if not getattr(_in_manager_init, "active", False):
            _emit("recorded", {})
        return result

    return capture_end_observed


def _observed_replay(replay: Any) -> Any:
    @functools.wraps(replay)
    def replay_observed(*args: Any, **kwargs: Any) -> Any:
        _emit("replay", {})
        return replay(*args, **kwargs)

    return replay_observed


def skip_count() -> int:
    """torch's own count of cudagraph skips (``counters["inductor"]["cudagraph_skips"]``)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return 0
    return int(utils.counters["inductor"]["cudagraph_skips"])


def _patch_compile_fx(module: ModuleType) -> None:
    _observation_patches.apply(module, "compile_fx", _observed_compile_fx)
    _observation_patches.apply(module, "cudagraphify", _observed_cudagraphify)


def _patch_compiled_graph(module: ModuleType) -> None:
    graph = getattr(module, "CompiledFxGraph", None)
    if isinstance(graph, type) and "post_compile" in graph.__dict__:
        _observation_patches.apply(graph, "__init__", _observed_graph_method)
        _observation_patches.apply(graph, "post_compile", _observed_graph_method)


def _patch_trees(module: ModuleType) -> None:
    _observation_patches.apply(module.CUDAGraphTreeManager, "__init__", _observed_manager_init)


def _patch_graphs(module: ModuleType) -> None:
    _observation_patches.apply(module.CUDAGraph, "capture_end", _observed_capture_end)
    _observation_patches.apply(module.CUDAGraph, "replay", _observed_replay)


# Each module is wrapped when it is imported (or at once if it is already): observing never
# imports anything, so a report costs no start-up and changes no import order.
_OBSERVED_MODULES: Final = {
    "torch._inductor.compile_fx": _patch_compile_fx,
    "torch._inductor.output_code": _patch_compiled_graph,
    "torch._inductor.codecache": _patch_compiled_graph,
    CUDAGRAPH_TREES: _patch_trees,
    "torch.cuda.graphs": _patch_graphs,
}
_observed_names: set[str] = set()


class _PatchOnImport:
    """A ``sys.meta_path`` finder that wraps the observed modules right after they load."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in _OBSERVED_MODULES or name in _observed_names:
            return None
        spec = _spec_without(self, name)
        if spec is not None:
            _run_after_exec(spec, functools.partial(_patch_loaded, name))
        return spec


_finder = _PatchOnImport()


def _patch_loaded(name: str, module: ModuleType) -> None:
    if name not in _observed_names and _observers:
        _observed_names.add(name)
        _OBSERVED_MODULES[name](module)


def start_observing(observer: Observer) -> None:
    """Calls ``observer(event, data)`` for compiles, cudagraph wrapping, skips, recordings and
    replays, in the thread where they happen."""
    _observers.append(observer)
    if len(_observers) > 1:
        return
    for name in _OBSERVED_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            _patch_loaded(name, module)
    sys.meta_path.insert(0, _finder)


def stop_observing(observer: Observer) -> None:
    if observer in _observers:
        _observers.remove(observer)
    if _observers:
        return
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    _observed_names.clear()
    _observation_patches.undo()


def _try_import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def cudagraph_switches_here() -> dict[str, Any]:
    """``triton.cudagraphs`` and ``triton.cudagraph_trees`` as the calling context sees them."""
    config = loaded_config(INDUCTOR_CONFIG)
    if config is None:
        return {}
    return {key: config.effective(key) for key in CUDAGRAPH_SWITCHES if config.has_key(key)}


def versions() -> dict[str, Any]:
    """torch, triton, CUDA, driver and Python versions, and the GPUs (CUDA is initialised)."""
    import platform

    torch = import_torch()
    triton = _try_import("triton")
    found: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "triton": getattr(triton, "__version__", None) if triton else None,
        "cuda": cuda_version(),
        "driver": None,
        "gpus": [],
    }
    if cuda_visible():
        found["gpus"] = [
            torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())
        ]
        found["driver"] = _driver_version()
    return found


def _driver_version() -> str | None:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        return None
