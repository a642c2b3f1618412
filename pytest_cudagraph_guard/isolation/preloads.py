"""What a zygote loads ahead for its test processes: what it loads first, which of the modules
a session or a test process loaded it may load for the next test process, and what the parent's
collection of a test module imported for it (:func:`module_collection_started`), kept in
pytest's cache for the next session's zygote to load while that session collects
(:func:`imports_last_seen`). Read by :mod:`.zygote`, :mod:`.ending`, :mod:`.runner`,
:mod:`.pool` and the plugin's collection hooks."""

from __future__ import annotations

import functools
import hashlib
import os
import site
import sys
import sysconfig
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, NamedTuple, TypedDict

import pytest

from .._torch import process_work
from .cuda import CudaUse
from .wire import NEEDED_MODULES_NAME, ModuleImports, ModuleLists, frame, read_frames, write_frames

PRELOAD_FIRST: Final = ("pytest", "pytest_cudagraph_guard.plugin", "torch")
# Each saves a test process a second of imports. Every test process needs them where the cudagraph
# settings are applied before the test (torch >= 2.12), and those that compile elsewhere: there
# they are loaded once a test process has needed them (loaded ahead, they would hold up a request
# that came during the import). Not torch._inductor.compile_fx: on torch 2.11 with triton,
# importing it starts a CUDA driver thread.
PRELOAD_FOR_COMPILING: Final = ("torch._dynamo", "torch._inductor.config")
# Modules the zygote loads for its next test process without a trial fork: pytest's own and this
# plugin's, which every session starts; less the plugin's that only the parent session runs.
TRUSTED_PREFIXES: Final = ("_pytest.", "pluggy.", "pytest_cudagraph_guard.")
PARENT_ONLY: Final = frozenset(
    f"{__package__}.{name}" for name in ("runner", "pool", "processes", "folders", "__main__")
)


def trusted(name: str) -> bool:
    """Whether a test process may find module ``name`` loaded: one known to start no thread and
    leave CUDA alone when imported, that a test process would load itself."""
    if name in PARENT_ONLY:
        return False
    return name in PRELOAD_FOR_COMPILING or name.startswith(TRUSTED_PREFIXES)


@functools.cache
def _installed_folders() -> tuple[str, ...]:
    """Where installed modules live: the standard library and the site folders."""
    kinds = ("stdlib", "platstdlib", "purelib", "platlib")
    found = {sysconfig.get_path(kind) for kind in kinds}
    if site.ENABLE_USER_SITE:
        found.add(site.getusersitepackages())
    return tuple(os.path.join(os.path.abspath(folder), "") for folder in found if folder)


def installed(name: str, project: Path | None = None) -> bool:
    """Whether the loaded module ``name`` is an installed one, importable by that name: built
    in, or from the standard library or a site folder, or, given the ``project``'s root folder,
    from a folder outside it; never one that pytest rewrote (the project's own code, its
    conftests and test modules, which each test process imports itself)."""
    spec = getattr(sys.modules.get(name), "__spec__", None)
    if spec is None or spec.name != name or _rewritten_by_pytest(spec):
        return False
    if spec.origin in ("built-in", "frozen"):
        return True
    origin = spec.origin if spec.has_location else None
    if not isinstance(origin, str):
        return False
    path = os.path.abspath(origin)
    if path.startswith(_installed_folders()):
        return True
    return project is not None and not path.startswith(os.path.join(str(project), ""))


def _rewritten_by_pytest(spec: Any) -> bool:
    """Whether pytest's assertion rewriting loaded the module: a test process must import it
    itself, for its asserts to be rewritten there too."""
    return type(spec.loader).__name__ == "AssertionRewritingHook"


def installed_plugin_modules(config: Any) -> set[str]:
    """The modules of the installed pytest plugins that ``config``'s session loaded."""
    return {
        name
        for plugin, _ in config.pluginmanager.list_plugin_distinfo()
        if isinstance(name := getattr(plugin, "__name__", None), str)
    }


_session_modules_key: Final = pytest.StashKey[tuple[int, ModuleLists]]()


def session_modules(config: pytest.Config) -> ModuleLists:
    """What the zygote may load of this process's modules and ``config``'s plugins, for every
    test's request: made again only when the number of loaded modules changed (a list that
    missed a swap of modules only loads less ahead)."""
    count = len(sys.modules)
    made = config.stash.get(_session_modules_key, None)
    if made is None or made[0] != count:
        made = (count, modules_for_a_zygote(list(sys.modules), installed_plugin_modules(config)))
        config.stash[_session_modules_key] = made
    return made[1]


def modules_for_a_zygote(
    names: Iterable[str],
    plugins: Iterable[str],
    outside_test: Iterable[str] = (),
    project: Path | None = None,
) -> ModuleLists:
    """Of the modules ``names`` (in the order they were loaded), those a zygote may load for its
    next test process: the trusted ones; those of the installed ``plugins``, which it tries in
    a fork first; and the installed ones of ``outside_test`` (what a test process imported as
    its session started or ended: its plugins' and conftests' imports), tried likewise."""
    names = list(dict.fromkeys(names))
    plugins = set(plugins).difference(PARENT_ONLY)
    outside = set(outside_test)
    return {
        "modules": sorted(name for name in names if trusted(name)),
        "plugins": sorted(plugins.intersection(names)),
        "started": [
            name
            for name in names
            if name in outside
            and name not in plugins
            and name not in PARENT_ONLY
            and not trusted(name)
            and installed(name, project)
        ],
    }


# --- what the parent's collection of a test module imported --------------------------------

_collecting_key: Final = pytest.StashKey[dict[str, tuple[frozenset[str], frozenset[str]]]]()
_module_imports_key: Final = pytest.StashKey[dict[str, ModuleImports]]()


def module_collection_started(module: pytest.Module) -> None:
    """Called in the parent as the collection of ``module`` starts, where its tests may run in
    processes of their own: what is loaded and done before the module is imported."""
    started = (frozenset(sys.modules), process_work.done_here())
    module.config.stash.setdefault(_collecting_key, {})[str(module.path)] = started


def module_collection_finished(module: pytest.Module) -> None:
    """Called once the collection of ``module`` has ended: the installed modules its import
    loaded, in the order their imports began, and torch's per-process work it did, for the
    requests of its tests (:func:`module_imports`)."""
    path = str(module.path)
    started = module.config.stash.get(_collecting_key, {}).pop(path, None)
    if started is None:
        return
    loaded, done = started
    project = module.config.rootpath
    names = [
        name
        for name in list(sys.modules)
        if name not in loaded and name not in PARENT_ONLY and installed(name, project)
    ]
    work = sorted(process_work.done_here() - done)
    recorded = module.config.stash.setdefault(_module_imports_key, {})
    earlier = recorded.get(path)  # a second collector of the file (--doctest-modules') adds
    if earlier is not None:
        names = [*earlier["names"], *(name for name in names if name not in earlier["names"])]
        work = sorted({*earlier["work"], *work})
    recorded[path] = {"module": path, "names": names, "work": work}
    _keep(module.config, recorded[path])


# pytest's cache: what each test module's import loaded when a session last collected it.
_LAST_SEEN_PREFIX: Final = "cudagraph_guard/module-imports/"


def imports_last_seen(module: pytest.Module) -> ModuleImports | None:
    """What ``module``'s import loaded when a session last collected it (pytest's cache): a
    zygote started as this session collects the module loads it meanwhile, instead of after the
    collection; None where no session kept it."""
    cache = getattr(module.config, "cache", None)
    if cache is None:
        return None
    found = cache.get(_last_seen_key(str(module.path)), None)
    if not isinstance(found, dict) or not all(
        isinstance(found.get(key), list) and all(isinstance(name, str) for name in found[key])
        for key in ("names", "work")
    ):
        return None
    return {"module": str(module.path), "names": found["names"], "work": found["work"]}


def _keep(config: pytest.Config, imports: ModuleImports) -> None:
    cache = getattr(config, "cache", None)
    if cache is None:
        return
    key = _last_seen_key(imports["module"])
    kept = {"names": imports["names"], "work": imports["work"]}
    if cache.get(key, None) != kept:
        with warnings.catch_warnings():  # pytest's own, where its cache cannot be written
            warnings.simplefilter("ignore")
            cache.set(key, kept)


def _last_seen_key(path: str) -> str:
    return f"{_LAST_SEEN_PREFIX}{hashlib.sha256(path.encode()).hexdigest()[:32]}"


def module_imports(item: pytest.Item) -> ModuleImports | None:
    """What the collection of ``item``'s module imported for it, where the parent saw it."""
    return item.config.stash.get(_module_imports_key, {}).get(str(item.path))


class Timings(TypedDict):
    """How long a test process took to set up (from its start to its test's, its collection
    included, less a spare's wait for its test) and to run its test, to its session's end."""

    set_up_s: float
    test_s: float


class Noted(NamedTuple):
    """What a test process noted for the zygote (:func:`note_needed_modules`)."""

    modules: ModuleLists
    cuda: CudaUse | None
    timings: Timings | None


def note_needed_modules(
    folder: Path, needed: ModuleLists, cuda: CudaUse, timings: Timings | None
) -> None:
    """Called by a test process once its test has finished and again as it ends, with the
    modules the next test process will need (:func:`modules_for_a_zygote`), its use of CUDA
    (whether spares should set up CUDA) and its timings (how many spares keep up). Tests that
    compile need dynamo, so the zygote loads it before the next fork; trivial tests do not, and
    do not wait for it. Replaced at once: the zygote may read it meanwhile."""
    noted = frame("needed", **needed, cuda=cuda, timings=timings)
    write_frames(folder / NEEDED_MODULES_NAME, [noted])


def needed_modules(folder: Path) -> Noted:
    """What the test process of ``folder`` noted (:func:`note_needed_modules`); nothing if it
    noted nothing readable."""
    try:
        (noted,) = read_frames(folder / NEEDED_MODULES_NAME)
        modules: ModuleLists = {
            "modules": [str(name) for name in noted["modules"]],
            "plugins": [str(name) for name in noted["plugins"]],
            "started": [str(name) for name in noted["started"]],
        }
        cuda = noted["cuda"]
        use: CudaUse = {
            "initialised": bool(cuda["initialised"]),
            "free_bytes": int(cuda["free_bytes"]),
        }
        timed = noted["timings"]
        timings: Timings | None = None
        if timed is not None:
            timings = {"set_up_s": float(timed["set_up_s"]), "test_s": float(timed["test_s"])}
    except (OSError, ValueError, LookupError, TypeError):
        return Noted(no_modules(), None, None)
    return Noted(modules, use, timings)


def no_modules() -> ModuleLists:
    return {"modules": [], "plugins": [], "started": []}
