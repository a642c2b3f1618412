"""Names and explains the thread, TLS and capture errors of CUDA graphs, for the report's
entries, the thread marker's failures and the public ``diagnose``.

Classification looks at the exception's type, the functions and files in its traceback and the
CUDA error text, never at torch's version string alone; hints are worded for the installed torch.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Final

import pytest

from ._torch import faults, release
from .core.entries import ErrorEntry
from .core.kinds import (
    CAPTURE_CONFLICT,
    OVERWRITTEN_OUTPUT,
    POOL_LEAK,
    THREAD_ERROR,
    TLS_CORRUPT,
    TLS_MISSING,
)

FIXED_IN: Final = (2, 13)
FIX_PR: Final = "pytorch PR #184357"

# cudaErrorStreamCapture* and friends (libcudart), and torch's own capture messages.
CAPTURE_MESSAGES: Final = (
    "operation not permitted when stream is capturing",
    "operation failed due to a previous error during capture",
    "operation would result in a merge of separate capture sequences",
    "capture was not ended in the same stream as it began",
    "capturing stream has unjoined work",
    "dependency created on uncaptured work in another stream",
    "operation would make the legacy stream depend on a capturing blocking stream",
    "operation not permitted on an event last recorded in a capturing stream",
    "attempt to terminate a thread-local capture sequence from another thread",
    "only one capture at a time is allowed in a process",
    "capture must end on the same stream it began on",
)
# torch's storage access error for an output a later replay overwrote ("gradient tensor output"
# for a backward's output from 2.13), and check_memory_pool's error (older releases: "These live
# storage data ptrs are in the cudagraph pool but not accounted for as an output ...").
OVERWRITTEN_MESSAGE: Final = "of cudagraphs that has been overwritten by a subsequent run"
GRADIENT_OVERWRITTEN: Final = "accessing gradient tensor output of cudagraphs"
POOL_LEAK_MESSAGES: Final = (
    "in the cudagraph pool not tracked as outputs",
    "in the cudagraph pool but not accounted for as an output",
)
GENERATION_CLONING: Final = "triton.cudagraph_trees_generation_cloning"
HISTORY_RECORDING: Final = "triton.cudagraph_trees_history_recording"
CAPTURE_SIZES: Final = "triton.cudagraph_capture_sizes"
NESTED_FX_TRACE: Final = "symbolically trace a dynamo-optimized function"
TLS_MACHINERY_MESSAGES: Final = ("py_objects.obj_dict_.count(key)",)
TREES_FILE: Final = ("_inductor/cudagraph_trees.py", "_inductor\\cudagraph_trees.py")


@dataclass(frozen=True)
class Diagnosis:
    """What kind of CUDA-graph problem an exception is, and what to do about it."""

    kind: str
    hint: str


# Other plugins' classifier (the ``pytest_cudagraph_diagnose`` hook), given the exception and the
# name of the thread that raised it.
DiagnoseHook = Callable[[BaseException, str], "Diagnosis | None"]


def hook_diagnoser(config: pytest.Config) -> DiagnoseHook:
    """The session's ``pytest_cudagraph_diagnose`` hook as a plain function. What an
    implementation raises (the user's or another plugin's code) never reaches the caller, which
    may be a thread's ``threading.excepthook``: it is warned once, and the exception asked about
    keeps its built-in kind."""

    def diagnose(exc: BaseException, thread_name: str) -> Diagnosis | None:
        try:
            found: Diagnosis | None = config.hook.pytest_cudagraph_diagnose(
                exc=exc, thread_name=thread_name
            )
        except Exception as error:
            _note_diagnose_hook_failure(error)
            return None
        return found

    return diagnose


def _note_diagnose_hook_failure(error: Exception) -> None:
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    faults.notice_once(
        "diagnose-hook",
        "cudagraph_guard: a pytest_cudagraph_diagnose hook (your conftest's or another "
        f"plugin's, not cudagraph_guard's own) raised {type_name(error)}: {error}; the "
        "exceptions it is asked about are recorded without a kind from it. Its traceback:\n"
        f"{trace}",
    )


def diagnose(exc: BaseException, thread_name: str | None = None) -> Diagnosis | None:
    """The kind and hint for ``exc``; ``thread-error`` for anything else outside the main thread.

    ``thread_name`` is the thread it was raised in (None or the main thread's name: the main
    thread). Returns None for an exception of the main thread that is no known kind.
    """
    for link in _chain(exc):
        found = _builtin_diagnosis(link)
        if found is not None:
            return found
    if thread_name is not None and thread_name != threading.main_thread().name:
        return Diagnosis(THREAD_ERROR, thread_error_hint(exc, thread_name))
    return None


def _builtin_diagnosis(exc: BaseException) -> Diagnosis | None:
    if isinstance(exc, AssertionError) and _innermost_is(exc, "get_obj", TREES_FILE):
        return Diagnosis(TLS_MISSING, tls_missing_hint())
    text = str(exc).lower()
    if isinstance(exc, (RuntimeError, SystemError)) and _mentions_tls_machinery(exc, text):
        return Diagnosis(TLS_CORRUPT, tls_corrupt_hint())
    if isinstance(exc, RuntimeError) and OVERWRITTEN_MESSAGE in text:
        return Diagnosis(OVERWRITTEN_OUTPUT, overwritten_output_hint(GRADIENT_OVERWRITTEN in text))
    if isinstance(exc, RuntimeError) and _is_pool_leak(exc, text):
        return Diagnosis(POOL_LEAK, pool_leak_hint())
    if isinstance(exc, RuntimeError) and any(m in text for m in CAPTURE_MESSAGES):
        return Diagnosis(CAPTURE_CONFLICT, capture_conflict_hint())
    return None


def _is_pool_leak(exc: BaseException, text: str) -> bool:
    return any(m in text for m in POOL_LEAK_MESSAGES) or _innermost_is(
        exc, "check_memory_pool", TREES_FILE
    )


def _mentions_tls_machinery(exc: BaseException, text: str) -> bool:
    if any(m.lower() in text for m in TLS_MACHINERY_MESSAGES):
        return True
    if isinstance(exc, SystemError) and "bad argument to internal function" in text:
        line = _innermost_line(exc)
        return "_in_tls" in line or _innermost_is(exc, None, TREES_FILE)
    return False


def _torch_label() -> str:
    version = release.torch_version()
    return f"torch {version}" if version else "this torch"


def tls_missing_hint() -> str:
    if release.release_tuple() >= FIXED_IN:
        return (
            "CUDAGraph Trees per-thread state is missing: torch >= 2.13 creates it lazily "
            f"({FIX_PR}), so an older get_obj is in use here (a patched or vendored "
            "cudagraph_trees); call pytest_cudagraph_guard.ensure_cudagraph_tls() first in this "
            "thread"
        )
    return (
        f"{_torch_label()} creates CUDAGraph Trees per-thread state only in the main thread and "
        "autograd's threads: call pytest_cudagraph_guard.ensure_cudagraph_tls() first in this "
        "thread (or mark the test cudagraph_thread(tls='init')), or upgrade to torch 2.13, "
        f"which creates it lazily ({FIX_PR})"
    )


def capture_conflict_hint() -> str:
    from ._torch import trees

    if release.release_tuple() >= FIXED_IN:
        return (
            "CUDA graph capture overlapped with CUDA work in another thread; torch >= 2.13 "
            "serializes warm-up and capture (graph_capture_lock) but not eager work, "
            "synchronize() or replays in other threads: keep them off the device while one "
            "thread captures"
        )
    if trees.serializes_captures_for_threads():
        return (
            "CUDA graph capture overlapped with CUDA work in another thread; cudagraph_thread"
            "(tls='init') serializes CUDAGraph Trees' warm-up and capture here, as torch 2.13's "
            "graph_capture_lock does, but not eager work, synchronize(), replays or captures of "
            "your own (torch.cuda.graph) in other threads: keep them off the device while one "
            "thread captures"
        )
    return (
        f"CUDA graph captures ran in several threads at once; {_torch_label()} does not "
        "serialize warm-up and capture (torch 2.13 added graph_capture_lock): mark the test "
        "cudagraph_thread(tls='init'), or warm up and capture each function from one thread "
        "at a time"
    )


def tls_corrupt_hint() -> str:
    return (
        "torch's C++ thread-local objects for CUDAGraph Trees were missing or broken "
        "(torch._C._get_obj_in_tls/_stash_obj_in_tls): create the state in the thread that "
        "uses it, before its first compiled call (ensure_cudagraph_tls()), and never from an "
        "autograd callback"
    )


def thread_error_hint(exc: BaseException, thread_name: str) -> str:
    from ._torch import trees

    if NESTED_FX_TRACE in str(exc) and trees.fx_tracing_is_per_thread():
        return (
            f"raised in thread {thread_name!r}: this thread called a compiled function while "
            f"it was FX-tracing ({_torch_label()} keeps that flag per thread, so no other "
            "thread caused it); trace the uncompiled function, or call the compiled one "
            "outside the traced code"
        )
    if NESTED_FX_TRACE in str(exc):
        return (
            f"raised in thread {thread_name!r}: {_torch_label()}'s FX-tracing flag is "
            "process-wide (per thread from torch 2.14), so a compiled function called while "
            "another thread compiles is taken for nested tracing; compile each function once "
            "before the threads run it, or compile in one thread at a time"
        )
    return (
        f"raised in thread {thread_name!r}, outside the main thread; not a known CUDA-graph "
        "thread problem"
    )


def _where_inductor_has(key: str, text: str) -> str:
    """``text`` where torch's inductor config has ``key`` (an advice naming it), else none."""
    from ._torch import config_access

    config = config_access.loaded_config(config_access.INDUCTOR_CONFIG)
    return text if config is not None and config.has_key(key) else ""


def overwritten_output_hint(gradient: bool = False) -> str:
    if gradient:
        return (
            "a .grad that the compiled backward allocated while its graph was recorded was "
            "overwritten by the next replay (gradient accumulation): allocate the .grad "
            "buffers before the compiled backward first runs (an eager warm-up step, or zeroed "
            "tensors), or set .grad to None before each backward"
        )
    cloning = _where_inductor_has(
        GENERATION_CLONING, f", or set torch._inductor.config.{GENERATION_CLONING} = 'user_visible'"
    )
    return (
        "an output of a CUDA graph was read after a later replay reused its memory: clone it "
        "outside the compiled function (out = compiled(x).clone()), or call "
        f"torch.compiler.cudagraph_mark_step_begin() before each step{cloning}"
    )


def pool_leak_hint() -> str:
    history = _where_inductor_has(
        HISTORY_RECORDING,
        f"; set torch._inductor.config.{HISTORY_RECORDING} = True to see where it was allocated",
    )
    return (
        "a tensor allocated in the CUDA graph pool is alive but is no output torch tracks: a "
        "custom op whose meta function hides an alias, or a tensor kept by a side effect of "
        f"the compiled code (a cache, a hook, a global); drop that reference{history}"
    )


def rerecord_hint(reason: str) -> str:
    """What to do about torch recording a function's graph again for ``reason``."""
    text = reason.lower()
    if "limit" in text:  # before the cause, which torch names in the same message
        return (
            "torch re-recorded this function so often that it now runs it without CUDA "
            "graphs: remove the cause of the re-recordings (the reason above)"
        )
    if "static input" in text:
        return (
            "a parameter, buffer or static input is a new tensor at another address (e.g. "
            "param.data = ..., a re-created optimizer state): update it in place (copy_) so "
            "the recorded graph can replay"
        )
    if "managed tensor" in text:
        return (
            "an output of an earlier CUDA graph fed back as input moved: keep the same "
            "tensors flowing between graphs, or clone the input before the call"
        )
    if "dead indices" in text or "still alive" in text:
        return (
            "outputs of a previous run that were dead when the graph was recorded are alive "
            "now: drop references to earlier outputs, or call "
            "torch.compiler.cudagraph_mark_step_begin() before each step"
        )
    if "input size" in text:
        sizes = _where_inductor_has(
            CAPTURE_SIZES,
            f", or list the sizes worth a graph in torch._inductor.config.{CAPTURE_SIZES}",
        )
        return f"each new input size records another CUDA graph: pad inputs to a few sizes{sizes}"
    return "a graph recorded again costs a capture each time: find what changes between calls"


def slow_path_hint(reason: str) -> str:
    """What to do about torch leaving the CUDA-graph fast path for ``reason``."""
    if "backward" in reason:
        return (
            "run the backward of each step before the next step's forward, detach outputs "
            "that need no gradient (or run under torch.no_grad()), or call "
            "torch.compiler.cudagraph_mark_step_begin() before each step"
        )
    return (
        "drop references to the outputs of earlier graphs before calling the next compiled "
        "function, or call torch.compiler.cudagraph_mark_step_begin() before each step"
    )


def timeout_hint(timeout: float) -> str:
    return (
        f"still running after {timeout:g} s; a thread waiting on another thread's CUDA graph "
        "capture or on the GIL holder hangs this way: see its stack"
    )


# --- records -----------------------------------------------------------------------------


def error_record(
    exc: BaseException,
    thread_name: str,
    diagnose_hook: DiagnoseHook | None = None,
) -> ErrorEntry:
    """A builtin-types description of an exception for reports: thread, type, message,
    kind, hint and a short traceback."""
    found = diagnose(exc, thread_name)
    if (found is None or found.kind == THREAD_ERROR) and diagnose_hook is not None:
        found = diagnose_hook(exc, thread_name) or found
    return ErrorEntry(
        thread_name,
        type_name(exc),
        str(exc),
        kind=found.kind if found else None,
        hint=found.hint if found else None,
        traceback=short_traceback(exc),
    )


def type_name(exc: BaseException) -> str:
    kind = type(exc)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def short_traceback(exc: BaseException, limit: int = 8) -> str:
    frames = traceback.extract_tb(exc.__traceback__)[-limit:]
    return "".join(traceback.format_list(frames)).rstrip()


# --- traceback helpers (``innermost`` also for the leak guard) ---------------------------------


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def innermost(exc: BaseException) -> TracebackType | None:
    """The entry of ``exc``'s traceback for the frame that raised it; None without a traceback."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def _innermost_is(exc: BaseException, function: str | None, files: tuple[str, ...]) -> bool:
    tb = innermost(exc)
    if tb is None:
        return False
    code = tb.tb_frame.f_code
    in_file = code.co_filename.endswith(files)
    return in_file and (function is None or code.co_name == function)


def _innermost_line(exc: BaseException) -> str:
    tb = innermost(exc)
    return (traceback.extract_tb(tb)[0].line or "") if tb is not None else ""
