"""Observing torch's compiles: every backend dynamo calls, with the function it compiles, every
inductor compile with its options, and every graph wrapped for CUDA graphs (``observe`` installs
these wrappers where a report is wanted). Each calls back with a typed event (``events``); the
wrapped call is unchanged."""

from __future__ import annotations

import functools
import threading
from types import ModuleType
from typing import Any, Final

from .config_access import CUDAGRAPH_SWITCHES
from .cudagraph_settings import cudagraph_settings_here, cudagraph_switches_here
from .events import (
    AUDIENCE,
    INDUCTOR_BACKEND,
    Compiled,
    CompileEnded,
    CompileOption,
    ConfigValues,
    Cudagraphified,
    emit,
)
from .faults import run_ours
from .function_names import compiled_function
from .patch_table import PATCHES
from .patches import Patches, owner_class
from .thread_names import thread_label

# .function: the function dynamo compiles now; .options: the keys its compile's options set
_COMPILING: Final = threading.local()


def compiling_now() -> tuple[str | None, frozenset[str]]:
    """The function this thread compiles now and the keys its compile's options set."""
    return getattr(_COMPILING, "function", None), getattr(_COMPILING, "options", frozenset())


def settings_moment() -> ConfigValues:
    """The settings as torch acts now, in the acting thread; the test has its first moment."""
    AUDIENCE.settings_wanted = False
    return cudagraph_settings_here()


def options_of(config_patches: object) -> dict[str, CompileOption]:
    if not isinstance(config_patches, dict):
        return {}
    return {str(k): v for k, v in config_patches.items() if isinstance(v, (bool, int, float, str))}


def _on_compile_fx(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    options = options_of(kwargs.get("config_patches"))
    if options:
        _COMPILING.options = frozenset(options)
    if options or not kwargs.get("inner_compile"):
        function = getattr(_COMPILING, "function", None)
        settings = settings_moment()
        emit(Compiled(thread_label(), INDUCTOR_BACKEND, options, settings, function))


def backend_name(compiler_fn: object) -> str:
    """A torch.compile backend as the user named it: its registered name or its callable's."""
    name = getattr(compiler_fn, "__name__", None) or getattr(compiler_fn, "compiler_name", None)
    return str(name or type(compiler_fn).__name__)


def _observed_user_compiler(call_user_compiler: Any) -> Any:
    """Dynamo's call of the backend, with the function it compiles; inductor's compiles are seen
    (with their options) in ``compile_fx``, inside this call."""
    loss = PATCHES["compile_events.backend"].loss

    def observe(output_graph: Any) -> None:
        function = compiled_function(output_graph)
        _COMPILING.function = function
        name = backend_name(getattr(output_graph, "compiler_fn", None))
        if name != INDUCTOR_BACKEND:
            emit(Compiled(thread_label(), name, {}, cudagraph_settings_here(), function))

    def observe_end(output_graph: Any) -> None:
        name = backend_name(getattr(output_graph, "compiler_fn", None))
        emit(CompileEnded(thread_label(), name, getattr(_COMPILING, "function", None)))

    @functools.wraps(call_user_compiler)
    def call_user_compiler_observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        outer, outer_options = compiling_now()  # a compile that started inside another
        _COMPILING.options = frozenset()
        run_ours(loss, observe, self)
        try:
            compiled = call_user_compiler(self, *args, **kwargs)
            run_ours(loss, observe_end, self)
            return compiled
        finally:
            _COMPILING.function, _COMPILING.options = outer, outer_options

    return call_user_compiler_observed


def _on_cudagraphify(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    trees = cudagraph_switches_here().get(CUDAGRAPH_SWITCHES[1])
    emit(Cudagraphified(thread_label(), trees))


def patch_compile_fx(module: ModuleType, patches: Patches) -> None:
    patches.observe(PATCHES["compile_events.compile_fx"], module, _on_compile_fx)
    patches.observe(PATCHES["compile_events.cudagraphify"], module, _on_cudagraphify)


def patch_output_graph(module: ModuleType, patches: Patches) -> None:
    row = PATCHES["compile_events.backend"]
    output_graph = owner_class(module, "OutputGraph", row)
    if output_graph is not None:
        patches.apply(row, output_graph, _observed_user_compiler)
