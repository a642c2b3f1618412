"""How a zygote loads modules for its test processes and stays able to fork. A list of modules is
imported in a trial fork first, in the order given, with the zygote's own check (no thread
started, CUDA untouched: :func:`.forking.fork_hazard`) made as each module's import completes,
the nested ones included. The trial says which modules completed, in the order they did, and
stops at the first after which a fork is unsound; the zygote then imports what completed before
it (each after the modules it imported itself, as they completed), and walks on in a new trial,
in which the unsound module is refused: a module that imports it is left to the test processes
without running it again. A module whose import fails is left likewise.

torch's per-process work (``_torch.process_work``) is done in the zygote itself, checked after by
the same rule (:func:`walk_work`). While it walks, an import that only asks whether CUDA exists
asks NVML (``process_work.cuda_asked_through_nvml``).
``preload`` imports one module in the zygote itself. Used by :mod:`.zygote`.
"""

from __future__ import annotations

import gc
import importlib.abc
import os
import select
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import ModuleType
from typing import Any, Final

from .._torch import process_work, runtime
from .forking import end_child, fork_hazard, fork_piped

# How long a trial may go without a word (each import says it starts) before the import under
# way is taken for one that hangs: the module is left to the test processes.
TRIAL_SILENCE_S: Final = 120.0
_DIED: Final = "a trial process died or hung importing it"
_NO_TRIAL: Final = "(none)"  # where no trial could be forked


def preload(name: str) -> str | None:
    """Imports module ``name`` for the test processes to come; what the parent should say if it
    could not (a missing torch is each test's to report, as a skip)."""
    try:
        runtime.import_quietly(name)
    except Exception as exc:
        print(f"zygote: could not preload {name}: {exc!r}", file=sys.stderr)
        if name.startswith("pytest"):
            raise
        if isinstance(exc, ModuleNotFoundError) and exc.name == "torch":
            return None
        return preload_failure(name, repr(exc))
    finally:
        gc.freeze()  # children then leave these objects to the collector's permanent generation
    return None


def preload_failure(name: str, error: str) -> str:
    return (
        f"cudagraph_subprocess: the zygote could not preload {name} ({error}); each test "
        "process imports it itself"
    )


@dataclass
class Walked:
    """What a walk left to the test processes: modules whose import failed (with the error) and
    modules (or work) after which a fork is not sound, or that import one (with why)."""

    failed: dict[str, str] = field(default_factory=dict)
    unsound: dict[str, str] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)  # not walked before its deadline


@dataclass
class _Trial:
    """What a trial said: the modules that completed while forks stayed sound, in order; those
    it left (why); the one after which a fork was unsound (why), where one was."""

    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    needs: dict[str, str] = field(default_factory=dict)
    unsound: tuple[str, str] | None = None


def walk_imports(
    names: Sequence[str], load: Callable[[str], None], until: float | None = None
) -> Walked:
    """Loads (``load``: the zygote's import) those of ``names`` that keep forks sound, and what
    they import that does; no new trial starts after ``until`` (``time.monotonic()``): what is
    left is ``Walked.pending``, for a later walk."""
    walked = Walked()
    pending = [name for name in dict.fromkeys(names) if name not in sys.modules]
    with process_work.cuda_asked_through_nvml():
        while pending and (until is None or time.monotonic() < until):
            trial = _read_trial(_trial(partial(_import_each, pending, dict(walked.unsound))))
            if trial.unsound is not None and trial.unsound[0] == _NO_TRIAL:
                break  # left for a later walk
            # A module left for what it imports fails at its end in the trial, taken out there.
            walked.failed |= {k: v for k, v in trial.failed.items() if k not in trial.needs}
            walked.unsound |= trial.needs
            if trial.unsound is not None:
                walked.unsound[trial.unsound[0]] = trial.unsound[1]
            walked.failed |= _load_refusing(_loadable(trial.done), load, walked.unsound)
            if trial.unsound is None:
                pending = []
                break
            left = walked.unsound.keys() | walked.failed.keys()
            pending = [name for name in pending if name not in sys.modules and name not in left]
    walked.pending = pending
    return walked


def _load_refusing(
    names: list[str], load: Callable[[str], None], refused: dict[str, str]
) -> dict[str, str]:
    """Loads ``names`` here with the unsound modules refused, as in the trials: a module the
    trial completed can still reach one through an import cycle, or through a module that caught
    its refusal there; such a module is left (its import fails here, so nothing of it stays).
    Returns the modules whose import failed here otherwise, with the error: left too."""
    guard = _Refusing(refused)
    sys.meta_path.insert(0, guard)
    try:
        failed = _load_each(names, load, refused)
        # A module completes in the trial before the one whose start made it importable (a
        # package that puts its vendored folder on sys.path, then imports from it): once more.
        return _load_each(list(failed), load, refused)
    finally:
        sys.meta_path.remove(guard)


def _load_each(
    names: list[str], load: Callable[[str], None], refused: dict[str, str]
) -> dict[str, str]:
    failed: dict[str, str] = {}
    for name in names:
        if name not in sys.modules:
            try:
                load(name)
            except _Refused as refusal:
                refused[name] = _needs(refusal.module)
            except Exception as exc:
                failed[name] = repr(exc)
    return failed


def walk_work(names: Sequence[str]) -> Walked:
    """Does here those of torch's per-process work ``names`` whose module is loaded (the rest is
    ``Walked.pending``), each then checked by the same rule. Not in a trial first: each row of
    the table was found to run only CPU work (compilers and Python processes, no thread left),
    and a trial would double what torch 2.11 takes for it (about 30 s of the vector-ISA
    checks)."""
    walked = Walked()
    with process_work.cuda_asked_through_nvml():
        for name in names:
            try:
                if not process_work.do(name):
                    walked.pending.append(name)
                    continue
            except Exception as exc:  # torch's: the test processes meet it themselves
                walked.failed[name] = repr(exc)
                continue
            hazard = fork_hazard()
            if hazard is not None:  # the zygote then forks no more: its tests are spawned
                walked.unsound[name] = hazard
    return walked


def _loadable(done: list[str]) -> list[str]:
    """Of the modules a trial completed (in order), those the zygote can import by name as they
    completed: the packages that hold each completed too (one still importing when the trial
    stopped would run its rest, the unsound part among it), or are loaded here already."""
    completed = set(done)
    return [
        name
        for name in done
        if name not in sys.modules
        and all(parent in completed or parent in sys.modules for parent in _packages_holding(name))
    ]


def _packages_holding(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


# --- the trial, in a fork -----------------------------------------------------------------


def _trial(body: Callable[[int], None]) -> list[str]:
    """Runs ``body`` in a fork, which writes its lines to the descriptor it is given; those lines,
    until the end of its pipe or :data:`TRIAL_SILENCE_S` without one (it is then killed)."""
    try:
        pid, read = fork_piped(body)
    except OSError as error:  # no room for another process: the test processes import it all
        return [f"unsound {_NO_TRIAL} {error!r}"]
    data = b""
    try:
        while select.select([read], [], [], TRIAL_SILENCE_S)[0]:
            chunk = os.read(read, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(read)
        end_child(pid)  # killed with its group first where it has not ended (it hung)
    return data.decode(errors="replace").splitlines()


def _read_trial(lines: list[str]) -> _Trial:
    """What the trial's lines say (:class:`_Watch`); one that ended without ``end`` or
    ``unsound`` (it died, or hung) stopped at the innermost import it had started."""
    trial = _Trial()
    started: list[str] = []
    for line in lines:
        word, _, rest = line.partition(" ")
        name, _, text = rest.partition(" ")
        if word == "start":
            started.append(name)
        elif word == "done":
            trial.done.append(name)
            if name in started:
                started.remove(name)
        elif word == "failed":
            trial.failed[name] = text
        elif word == "needs":
            trial.needs[name] = _needs(text)
        elif word == "unsound":
            trial.unsound = (name, text)
            return trial
        elif word == "end":
            return trial
    if started:
        trial.unsound = (started[-1], _DIED)
    return trial


def _needs(module: str) -> str:
    return f"it imports {module}, which a fork cannot follow"


def _say(told: int, *words: str) -> None:
    os.write(told, (" ".join(" ".join(words).split()) + "\n").encode())


class _Refused(BaseException):  # not an ImportError: no module may catch it
    """Raised, in a trial, where a module imports one known to leave a fork unsound."""

    def __init__(self, module: str) -> None:
        super().__init__(module)
        self.module = module


def _import_each(names: Sequence[str], refused: dict[str, str], told: int) -> None:
    """In the trial: imports ``names`` in order, watched (:class:`_Watch`)."""
    watch = _Watch(refused, told)
    sys.meta_path.insert(0, watch)
    for name in names:
        if name in sys.modules:
            continue
        try:
            runtime.import_quietly(name)
        except _Refused as refusal:
            _say(told, "needs", name, refusal.module)
        except BaseException as exc:  # a module may even exit: the test process meets it itself
            _say(told, "failed", name, repr(exc))
    _say(told, "end")


class _Refusing(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: refuses the modules known to leave a fork unsound."""

    def __init__(self, refused: dict[str, str]) -> None:
        self.refused = refused

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name in self.refused:
            raise _Refused(name)
        return None


class _Watch(_Refusing):
    """In a trial, first on ``sys.meta_path``: says each module's import as it starts and as it
    completes, checks after each that a fork is still sound (else says why and ends the trial),
    and refuses the modules known to leave it unsound. A module whose import met a refusal
    (even one it caught) is said to need the refused one, not to be done."""

    def __init__(self, refused: dict[str, str], told: int) -> None:
        super().__init__(refused)
        self.told = told
        self.importing: list[str] = []
        self.tainted: dict[str, str] = {}  # importing module: the refused one it met

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        try:
            super().find_spec(name, path, target)
        except _Refused:
            for importer in self.importing:
                self.tainted.setdefault(importer, name)
            raise
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _WatchedLoader(spec.loader, self)  # type: ignore[assignment]
                return spec
        return None

    def started(self, name: str) -> None:
        self.importing.append(name)
        _say(self.told, "start", name)

    def completed(self, name: str) -> None:
        self.importing.remove(name)
        if name in self.tainted:
            # Refused from now on, as the zygote will not have it: whatever imports it later
            # meets the refusal too.
            refused = self.tainted.pop(name)
            _say(self.told, "needs", name, refused)
            self.refused[name] = refused
            sys.modules.pop(name, None)
            return
        hazard = fork_hazard()
        if hazard is not None:
            _say(self.told, "unsound", name, hazard)
            os._exit(0)
        _say(self.told, "done", name)


class _WatchedLoader:
    """A module's loader, in a trial: what it does, said to the watch (``_Watch``)."""

    def __init__(self, loader: Any, watch: _Watch) -> None:
        self._loader = loader
        self._watch = watch

    def create_module(self, spec: Any) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        self._watch.started(module.__name__)
        try:
            self._loader.exec_module(module)
        except BaseException:
            self._watch.importing.remove(module.__name__)
            raise
        self._watch.completed(module.__name__)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
