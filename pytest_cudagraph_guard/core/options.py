"""Every option and ini key of the plugin, declared once (``DECLARED``, added by ``plugin.py``'s
``pytest_addoption``) and resolved once per session (by ``plugin.py``, read by every feature
through ``core.session``) into one frozen :class:`PluginOptions`: the command line, else the ini
file, else the default, each value with where it came from. A bad value is one usage error that
names that origin and the value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, Literal, NamedTuple

import pytest

from .kinds import ALL_KINDS
from .markers import (
    ENV_NAME_RULE,
    SUBPROCESS_MARKER,
    THREAD_MARKER,
    TLS_MODES,
    SubprocessOptions,
    ThreadOptions,
    is_env_name,
)
from .report_formats import FORMAT_HELP, ReportFormat, report_formats

DEFAULT_ORIGIN: Final = "default"
INI_PREFIX: Final = "cudagraph_"
GUARD_MODES: Final = ("restore", "warn", "fail", "off")
DEFAULT_GUARD_MODE: Final = "warn"
# Kinds of --cudagraph-fail-on that are not errors' kinds: what the guard and the skips find.
LEAK: Final = "leak"
CUDAGRAPH_SKIP: Final = "cudagraph-skip"
FAIL_ON_KINDS: Final = (*ALL_KINDS, LEAK, CUDAGRAPH_SKIP)
# --cudagraph-gpus: where the devices go. A count of GPUs, or the tuple of their indices.
GPUS_AUTO: Final = "auto"
GPUS_OFF: Final = "off"
GpuChoice = str | int | tuple[int, ...]
# The words pytest's own bool ini keys accept.
TRUE_WORDS: Final = ("1", "true", "t", "yes", "y", "on")
FALSE_WORDS: Final = ("0", "false", "f", "no", "n", "off")


def ini_key(name: str) -> str:
    """The ini key of the option ``name`` (a field of :class:`PluginOptions`)."""
    return INI_PREFIX + name


def option_flag(name: str) -> str:
    """The command-line option of the option ``name``."""
    return "--" + ini_key(name).replace("_", "-")


def ini_origin(name: str) -> str:
    """Where a value the ini file gave came from, as the report's origins say it."""
    return f"ini option {ini_key(name)}"


# The option that applies each marker to a suite's unmarked tests.
FIELD_OF: Final = {THREAD_MARKER: "threads", SUBPROCESS_MARKER: "subprocess"}


def applied_lines(tests_by_applier: Mapping[str, int]) -> list[str]:
    """What the suite options applied, from the number of tests each applied its marker to,
    by the option or ini key that did (``applied_by``): e.g. ``cudagraph_subprocess applied to
    517 tests by --cudagraph-subprocess``."""
    lines = []
    for marker, field in FIELD_OF.items():
        for applier in (option_flag(field), ini_origin(field)):
            count = tests_by_applier.get(applier, 0)
            if count:
                tests = "test" if count == 1 else "tests"
                lines.append(f"{marker} applied to {count} {tests} by {applier}")
    return lines


class PluginOptions(NamedTuple):
    """The session's options; each field is the ini key less ``cudagraph_`` (``on``: the ini key
    ``cudagraph_on``, ``--cudagraph-on``)."""

    guard: str = DEFAULT_GUARD_MODE
    report: tuple[ReportFormat, ...] = ()
    threads: int = 0  # 0: off
    tls: str = "native"
    subprocess: bool = False
    on: bool = False  # CUDA graphs on for every test
    timeout: float | None = None  # the markers' default timeout where they give none
    fail_on: frozenset[str] = frozenset()
    cuda_ahead: bool = True
    spares: int | None = None  # processes set up ahead per zygote; None: automatic
    process_env: tuple[tuple[str, str], ...] = ()  # set in every test process
    gpus: GpuChoice = GPUS_AUTO  # auto, off, a count, or a tuple of device indices
    settings: bool = False  # print the settings and exit
    # (field, where its value came from: "--cudagraph-threads", "ini option cudagraph_threads"
    # or "default"), for every field
    origins: tuple[tuple[str, str], ...] = ()

    @property
    def applies_markers(self) -> bool:
        return self.threads > 0 or self.subprocess

    def applier(self, marker: str) -> str:
        """The option or ini key that applies ``marker`` to the suite's tests, as its origin
        says it (``--cudagraph-subprocess``, ``ini option cudagraph_subprocess``)."""
        return self.origin_of(FIELD_OF[marker])

    def origin_of(self, field: str) -> str:
        """Where the option ``field`` came from, as the report says it: its command-line flag,
        else ``ini option cudagraph_...``."""
        return next((o for n, o in self.origins if n == field), option_flag(field))

    def as_json(self) -> dict[str, object]:
        """The options as the report's environment shows them, field by field (``settings`` is
        never on in a session that runs tests)."""
        shown: dict[str, object] = self._asdict()
        del shown["settings"]
        return shown | {
            "report": [str(fmt) for fmt in self.report],
            "fail_on": sorted(self.fail_on),
            "process_env": dict(self.process_env),
            "gpus": list(self.gpus) if isinstance(self.gpus, tuple) else self.gpus,
            "origins": {name: origin for name, origin in self.origins if name != "settings"},
        }


_options_key = pytest.StashKey[PluginOptions]()


def plugin_options(config: pytest.Config) -> PluginOptions:
    """The session's options, resolved and checked once (``pytest_configure`` does it first)."""
    options = config.stash.get(_options_key, None)
    if options is None:
        options = config.stash[_options_key] = resolve_options(config)
    return options


def resolve_options(config: pytest.Config) -> PluginOptions:
    values: dict[str, Any] = {}
    origins = []
    for name, declared in DECLARED.items():
        raw, origin = _given(config, name, declared)
        origins.append((name, origin))
        if origin != DEFAULT_ORIGIN:
            values[name] = declared.read(raw, origin)
    return PluginOptions(**values, origins=tuple(origins))


def _given(config: pytest.Config, name: str, declared: Declared) -> tuple[Any, str]:
    """The raw value of option ``name`` and its origin (``DEFAULT_ORIGIN`` where neither the
    command line nor the ini file gives one)."""
    if declared.help is not None:
        value = config.getoption(ini_key(name))
        if value is not None and value is not False:
            return value, option_flag(name)
    if declared.ini_help is not None:
        value = config.getini(ini_key(name))
        if not _blank(value):
            return value, ini_origin(name)
    return None, DEFAULT_ORIGIN


def _blank(value: object) -> bool:
    if isinstance(value, str):
        return not value.strip()
    return value is None or value == []


# --- one reader per option: (raw value, origin) -> value, or a usage error naming the origin --


def _error(origin: str, expected: str, value: object) -> pytest.UsageError:
    return pytest.UsageError(f"{origin}: expected {expected}, got {value!r}")


def _text(value: object) -> str:
    return str(value).strip()


def _one_of(choices: tuple[str, ...]) -> Callable[[object, str], str]:
    def read(value: object, origin: str) -> str:
        if _text(value) not in choices:
            raise _error(origin, _either(choices), value)
        return _text(value)

    return read


def _either(choices: tuple[str, ...]) -> str:
    return f"{', '.join(choices[:-1])} or {choices[-1]}"


def ascii_digits(text: str) -> bool:
    """Whether ``int`` reads ``text`` as the digits it shows (``"²".isdigit()`` is true)."""
    return text.isascii() and text.isdigit()


def _boolean(value: object, origin: str) -> bool:
    if isinstance(value, bool):
        return value
    word = _text(value).lower()
    if word not in TRUE_WORDS + FALSE_WORDS:
        raise _error(origin, "true or false", value)
    return word in TRUE_WORDS


def _whole_number(value: object, origin: str) -> int:
    if not ascii_digits(_text(value)):
        raise _error(origin, "a whole number of threads (0: off)", value)
    return int(_text(value))


def _spares(value: object, origin: str) -> int | None:
    if _text(value) == "auto":
        return None
    if not ascii_digits(_text(value)):
        raise _error(origin, "auto or a whole number of processes (0: none)", value)
    return int(_text(value))


def _seconds(value: object, origin: str) -> float:
    try:
        seconds = float(_text(value))
    except ValueError:
        raise _error(origin, "a positive number of seconds", value) from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise _error(origin, "a positive number of seconds", value)
    return seconds


GPUS_EXPECTED: Final = (
    "auto, off, a positive number of GPUs or device indices I,I,... (one index: I,)"
)


def _gpus(value: object, origin: str) -> GpuChoice:
    """``auto``, ``off``, a count (``2``) or device indices (``0,2``; one index: ``3,``, told
    from a count by its comma). Whether the indices are the host's is known only once the
    devices are counted (``devices``), which says so as a usage error naming ``origin``."""
    text = _text(value)
    if text in (GPUS_AUTO, GPUS_OFF):
        return text
    if "," not in text:
        if not (ascii_digits(text) and int(text) > 0):
            raise _error(origin, GPUS_EXPECTED, value)
        return int(text)
    parts = [part.strip() for part in text.split(",")]
    indices = parts[:-1] if not parts[-1] else parts  # "3,": the one index 3
    if not indices or not all(ascii_digits(part) for part in indices):
        raise _error(origin, GPUS_EXPECTED, value)
    found = tuple(int(part) for part in indices)
    if len(set(found)) != len(found):
        raise pytest.UsageError(f"{origin}: device index given twice in {text!r}")
    return found


def _words(value: object) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [word for item in items for word in str(item).replace(",", " ").split()]


def _kinds(value: object, origin: str) -> frozenset[str]:
    kinds = _words(value)
    unknown = [kind for kind in kinds if kind not in FAIL_ON_KINDS]
    if unknown:
        raise pytest.UsageError(
            f"{origin}: unknown kind(s) {', '.join(map(repr, unknown))}; "
            f"known kinds: {', '.join(FAIL_ON_KINDS)}"
        )
    return frozenset(kinds)


def _environment(value: object, origin: str) -> tuple[tuple[str, str], ...]:
    lines = value if isinstance(value, list) else str(value).splitlines()
    found: dict[str, str] = {}
    for line in (str(line).strip() for line in lines):
        name, equals, text = line.partition("=")
        if not line:
            continue
        if not (equals and is_env_name(name.strip()) and "\0" not in text):
            raise _error(origin, f"lines of NAME=VALUE (NAME: {ENV_NAME_RULE})", line)
        found[name.strip()] = text.strip()
    return tuple(found.items())


# --- the declarations, in the order ``pytest --help`` shows them ------------------------------


class Declared(NamedTuple):
    """One option: its reader (of a raw value: text, a list for the list ini keys, or what
    argparse made; a command-line option not given is None, told from a value); its command-line
    option's help (None: an ini key only) and argparse keywords; its ini key's help (None: the
    command line only) and ini type."""

    read: Callable[[Any, str], Any]
    help: str | None
    ini_help: str | None = None
    ini_type: Literal["args", "linelist"] | None = None  # else text
    argparse: Mapping[str, Any] = MappingProxyType({})


DECLARED: Final = {
    "guard": Declared(
        _one_of(GUARD_MODES),
        "what to do when a test leaves torch._inductor/_dynamo config or TORCHINDUCTOR_*, "
        "TORCHDYNAMO_*, TORCH_COMPILE* variables changed: restore them silently, warn "
        "(restore and warn), fail (restore and error the test), or off. "
        f"Default: ini cudagraph_guard, else {DEFAULT_GUARD_MODE}.",
        f"default for --cudagraph-guard: one of {', '.join(GUARD_MODES)}",
        argparse={"choices": GUARD_MODES},
    ),
    "report": Declared(
        report_formats,
        "report, per test, the effective cudagraph settings with their source, the CUDA-graph "
        f"work that happened and every thread/TLS error; FORMAT is {FORMAT_HELP} "
        "(default term); repeatable",
        f"report formats when --cudagraph-report is not given: {FORMAT_HELP}",
        "args",
        {"action": "append", "nargs": "?", "const": "term", "metavar": "FORMAT"},
    ),
    "threads": Declared(
        _whole_number,
        "run every test that has none of the plugin's markers as if marked "
        "cudagraph_thread(threads=N, tls=--cudagraph-tls), its settings as in the main thread; "
        "0 (the default): off",
        "default for --cudagraph-threads",
        argparse={"metavar": "N"},
    ),
    "tls": Declared(
        _one_of(TLS_MODES),
        "the tls= of the threads that --cudagraph-threads applies (default native)",
        "default for --cudagraph-tls",
        argparse={"metavar": "{native,init}"},
    ),
    "subprocess": Declared(
        _boolean,
        "run every test that has none of the plugin's markers as if marked "
        "cudagraph_subprocess(), its settings as in the main process: a test that crashes the "
        "interpreter fails alone",
        "default for --cudagraph-subprocess (true or false)",
        argparse={"action": "store_true"},
    ),
    "on": Declared(
        _boolean,
        "run every test with triton.cudagraphs and triton.cudagraph_trees on (an audit of a "
        "suite under CUDA graphs), in its threads or process too",
        "default for --cudagraph-on (true or false)",
        argparse={"action": "store_true"},
    ),
    "timeout": Declared(
        _seconds,
        "the default timeout of both markers and of the options that apply them. Default: ini "
        f"cudagraph_timeout, else {ThreadOptions().timeout:g} s for {THREAD_MARKER} and "
        f"{SubprocessOptions().timeout:g} s for {SUBPROCESS_MARKER}",
        "default for --cudagraph-timeout",
        argparse={"metavar": "SECONDS"},
    ),
    "fail_on": Declared(
        _kinds,
        "fail a test, at teardown, whose record holds one of these kinds: "
        + ", ".join(FAIL_ON_KINDS)
        + ". Default: ini cudagraph_fail_on, else none",
        "default for --cudagraph-fail-on",
        argparse={"metavar": "KIND[,KIND...]"},
    ),
    "cuda_ahead": Declared(
        _boolean,
        None,
        "test processes that cudagraph_subprocess sets up ahead initialise CUDA before their "
        "test, once the session's tests have shown they use it (true or false; default true)",
    ),
    "spares": Declared(
        _spares,
        None,
        "how many test processes cudagraph_subprocess sets up ahead: a whole number, or auto "
        "(the default: one, and once the session's tests use CUDA as many as the cores and "
        "the GPU's free memory allow, at most 8)",
    ),
    "process_env": Declared(
        _environment,
        None,
        "lines of NAME=VALUE set in every test process of cudagraph_subprocess and "
        "--cudagraph-subprocess before it initialises CUDA (e.g. CUDA_DEVICE_MAX_CONNECTIONS=1); "
        "a marker's env= wins",
        "linelist",
    ),
    "gpus": Declared(
        _gpus,
        "the GPUs of the host that xdist workers and the plugin's test processes get, through "
        "CUDA_VISIBLE_DEVICES: auto (every GPU where there are several; one GPU: nothing "
        "changes), a number of GPUs, device indices I,I,... or off. Default: ini "
        "cudagraph_gpus, else auto",
        "default for --cudagraph-gpus",
        argparse={"metavar": "{auto,N,I[,I...],off}"},
    ),
    "settings": Declared(
        _boolean,
        "print the effective cudagraph settings with their sources, the relevant "
        "environment variables, versions and GPUs, then exit without running tests",
        argparse={"action": "store_true"},
    ),
}


def add_options(parser: pytest.Parser) -> None:
    """Adds each option of ``DECLARED`` on the command line, as an ini key, or both."""
    group = parser.getgroup("cudagraph-guard", "CUDA graphs and torch config (cudagraph-guard)")
    for name, declared in DECLARED.items():
        if declared.help is not None:
            flag, dest = option_flag(name), ini_key(name)
            group.addoption(flag, dest=dest, default=None, help=declared.help, **declared.argparse)
    for name, declared in DECLARED.items():
        if declared.ini_help is not None:
            default = [] if declared.ini_type else ""
            parser.addini(ini_key(name), declared.ini_help, declared.ini_type, default)
