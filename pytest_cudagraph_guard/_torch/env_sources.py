"""Which environment variables torch reads for a config key, found in the config module's
source, and which one torch writes itself; for the settings' sources and the environment
leak's wording (``torch_settings``, ``guard.diff``, :mod:`.torch_env`)."""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Final

from .runtime import import_quietly, torch_loaded

ENV_NAME_PREFIXES: Final = ("TORCHINDUCTOR_", "TORCHDYNAMO_", "TORCH_")
CACHE_DIR_UTILS: Final = "torch._inductor.runtime.cache_dir_utils"


@functools.cache
def env_variables_read(module_name: str) -> frozenset[str]:
    """Every ``TORCHINDUCTOR_*``/``TORCHDYNAMO_*``/``TORCH_*`` name in a module's source."""
    return frozenset(_variable_names(_source_tree(module_name)))


def is_torch_env_memo(key: str, before: str | None, after: str | None) -> bool:
    """Whether torch itself wrote ``key``: ``cache_dir()`` stores its resolved default there."""
    if key != "TORCHINDUCTOR_CACHE_DIR" or before is not None or after is None:
        return False
    if not torch_loaded():
        return False
    try:
        return bool(os.path.abspath(_cache_dir_utils().default_cache_dir()) == after)
    except Exception:
        return False


def _cache_dir_utils() -> ModuleType:
    """torch's ``cache_dir_utils``: as loaded, else read from its file alone, which torch keeps
    free of torch's heavy imports ("without torch dependencies"); imported by its name, it would
    run ``torch._inductor``'s package first, and dynamo with it: seconds of a report that reads
    the environment of a session that never compiles."""
    loaded = sys.modules.get(CACHE_DIR_UTILS)
    if loaded is not None:
        return loaded
    return _standalone_cache_dir_utils()


@functools.cache
def _standalone_cache_dir_utils() -> ModuleType:
    path = Path(sys.modules["torch"].__file__ or "").parent / "_inductor/runtime/cache_dir_utils.py"
    spec = importlib.util.spec_from_file_location("_cudagraph_guard_cache_dir_utils", path)
    if spec is None or spec.loader is None:
        return import_quietly(CACHE_DIR_UTILS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
def env_names(module_name: str) -> dict[str, list[str]]:
    """``{dotted key: [environment variables]}`` that torch reads for a key of a config module:
    ``Config(env_name_default=..., env_name_force=...)`` and the import-time
    ``os.environ.get("NAME") == "1"`` defaults."""
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


def _assignment(node: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        return (target.id if isinstance(target, ast.Name) else None), node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id, node.value
    return None, None
