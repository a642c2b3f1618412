"""How each option's raw value is read: ``(raw value, origin) -> value``, or one usage error that
names the origin (the command-line flag or the ini key) and the value. ``options.DECLARED``
names the reader of each option.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

import pytest

from .markers import ENV_NAME_RULE, is_env_name

# --cudagraph-gpus: where the devices go. A count of GPUs, or the tuple of their indices.
GPUS_AUTO: Final = "auto"
GPUS_OFF: Final = "off"
GpuChoice = str | int | tuple[int, ...]
# The words pytest's own bool ini keys accept.
TRUE_WORDS: Final = ("1", "true", "t", "yes", "y", "on")
FALSE_WORDS: Final = ("0", "false", "f", "no", "n", "off")


def usage_error(origin: str, expected: str, value: object) -> pytest.UsageError:
    return pytest.UsageError(f"{origin}: expected {expected}, got {value!r}")


def text_of(value: object) -> str:
    return str(value).strip()


def one_of(choices: tuple[str, ...]) -> Callable[[object, str], str]:
    def read(value: object, origin: str) -> str:
        if text_of(value) not in choices:
            raise usage_error(origin, either(choices), value)
        return text_of(value)

    return read


def either(choices: tuple[str, ...]) -> str:
    return f"{', '.join(choices[:-1])} or {choices[-1]}"


def ascii_digits(text: str) -> bool:
    """Whether ``int`` reads ``text`` as the digits it shows (``"²".isdigit()`` is true)."""
    return text.isascii() and text.isdigit()


def boolean(value: object, origin: str) -> bool:
    if isinstance(value, bool):
        return value
    word = text_of(value).lower()
    if word not in TRUE_WORDS + FALSE_WORDS:
        raise usage_error(origin, "true or false", value)
    return word in TRUE_WORDS


def whole_number(value: object, origin: str) -> int:
    if not ascii_digits(text_of(value)):
        raise usage_error(origin, "a whole number of threads (0: off)", value)
    return int(text_of(value))


def spares(value: object, origin: str) -> int | None:
    if text_of(value) == "auto":
        return None
    if not ascii_digits(text_of(value)):
        raise usage_error(origin, "auto or a whole number of processes (0: none)", value)
    return int(text_of(value))


def seconds(value: object, origin: str) -> float:
    try:
        found = float(text_of(value))
    except ValueError:
        raise usage_error(origin, "a positive number of seconds", value) from None
    if not math.isfinite(found) or found <= 0:
        raise usage_error(origin, "a positive number of seconds", value)
    return found


GPUS_EXPECTED: Final = (
    "auto, off, a positive number of GPUs or device indices I,I,... (one index: I,)"
)


def gpus(value: object, origin: str) -> GpuChoice:
    """``auto``, ``off``, a count (``2``) or device indices (``0,2``; one index: ``3,``, told
    from a count by its comma). Whether the indices are the host's is known only once the
    devices are counted (``devices``), which says so as a usage error naming ``origin``."""
    text = text_of(value)
    if text in (GPUS_AUTO, GPUS_OFF):
        return text
    if "," not in text:
        if not (ascii_digits(text) and int(text) > 0):
            raise usage_error(origin, GPUS_EXPECTED, value)
        return int(text)
    parts = [part.strip() for part in text.split(",")]
    indices = parts[:-1] if not parts[-1] else parts  # "3,": the one index 3
    if not indices or not all(ascii_digits(part) for part in indices):
        raise usage_error(origin, GPUS_EXPECTED, value)
    found = tuple(int(part) for part in indices)
    if len(set(found)) != len(found):
        raise pytest.UsageError(f"{origin}: device index given twice in {text!r}")
    return found


def words(value: object) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [word for item in items for word in str(item).replace(",", " ").split()]


def kinds_of(known: tuple[str, ...]) -> Callable[[object, str], frozenset[str]]:
    """A reader of kinds (words, spaces or commas between them), each one of ``known``."""

    def read(value: object, origin: str) -> frozenset[str]:
        found = words(value)
        unknown = [word for word in found if word not in known]
        if unknown:
            raise pytest.UsageError(
                f"{origin}: unknown kind(s) {', '.join(map(repr, unknown))}; "
                f"known kinds: {', '.join(known)}"
            )
        return frozenset(found)

    return read


def environment(value: object, origin: str) -> tuple[tuple[str, str], ...]:
    lines = value if isinstance(value, list) else str(value).splitlines()
    found: dict[str, str] = {}
    for line in (str(line).strip() for line in lines):
        name, equals, text = line.partition("=")
        if not line:
            continue
        if not (equals and is_env_name(name.strip()) and "\0" not in text):
            raise usage_error(origin, f"lines of NAME=VALUE (NAME: {ENV_NAME_RULE})", line)
        found[name.strip()] = text.strip()
    return tuple(found.items())
