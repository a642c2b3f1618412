"""Compiled functions as their users know them, ``step (model.py:12)``: from the code dynamo
traces, or from the stack traces torch records with each graph of CUDAGraph Trees."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def function_name(manager: Any, function_id: Any) -> str:
    """A compiled function as its user knows it: the innermost user frame of its recorded stack
    traces (``fn (model.py:12)``), else its tree manager's function id."""
    traces = getattr(manager, "ids_to_stack_traces", {}).get(function_id)
    return name_from_traces(traces) or unnamed(function_id)


def unnamed(function_id: Any) -> str:
    return f"compiled function #{getattr(function_id, 'id', function_id)}"


def name_from_traces(traces: Iterable[Any] | None) -> str | None:
    for trace in traces or ():
        frames = [line.strip() for line in str(trace or "").splitlines()]
        frames = [line for line in frames if line.startswith("File ")]
        if frames:
            where, _, name = frames[-1].rpartition(", in ")
            file_part, _, line_part = where.partition(", line ")
            return _as_user_knows_it(name, file_part.removeprefix("File ").strip('"'), line_part)
    return None


def node_function(node: Any) -> str:
    function_id = getattr(getattr(node, "wrapped_function", None), "id", None)
    return name_from_traces(getattr(node, "stack_traces", None)) or unnamed(function_id)


def function_id_of(args: tuple[object, ...], kwargs: dict[str, object]) -> object:
    """The ``function_id`` argument of a tree manager's method, however it was passed."""
    return kwargs.get("function_id", args[1] if len(args) > 1 else None)


def compiled_function(output_graph: Any) -> str | None:
    """The function dynamo compiles, as its user knows it (``step (model.py:12)``), from the
    code it traces."""
    fields = getattr(output_graph, "co_fields", None)
    if not isinstance(fields, dict) or not fields.get("co_name"):
        return None
    file_path, line = fields.get("co_filename") or "?", fields.get("co_firstlineno", "?")
    return _as_user_knows_it(fields["co_name"], str(file_path), line)


def _as_user_knows_it(name: str, file_path: str, line: object) -> str:
    """``step (model.py:12)``: the function, its file's name and the line."""
    file_name = file_path.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{name} ({file_name}:{line})"
