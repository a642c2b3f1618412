"""Every option and ini key of the plugin, declared once (``DECLARED``, added by ``plugin.py``'s
``pytest_addoption``) and resolved once per session (by ``plugin.py``, read by every feature
through ``core.session``) into one frozen :class:`PluginOptions`: the command line, else the ini
file, else the default, each value with where it came from. A bad value is one usage error that
names that origin and the value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, Literal, NamedTuple

import pytest

from . import option_readers as read
from .kinds import ALL_KINDS
from .markers import (
    SUBPROCESS_MARKER,
    THREAD_MARKER,
    TLS_MODES,
    SubprocessOptions,
    ThreadOptions,
)
from .option_readers import GPUS_AUTO, GpuChoice
from .report_formats import FORMAT_HELP, ReportFormat, report_formats

DEFAULT_ORIGIN: Final = "default"
INI_PREFIX: Final = "cudagraph_"
GUARD_MODES: Final = ("restore", "warn", "fail", "off")
DEFAULT_GUARD_MODE: Final = "warn"
# Kinds of --cudagraph-fail-on that are not errors' kinds: what the guard and the skips find.
LEAK: Final = "leak"
CUDAGRAPH_SKIP: Final = "cudagraph-skip"
FAIL_ON_KINDS: Final = (*ALL_KINDS, LEAK, CUDAGRAPH_SKIP)


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
        read.one_of(GUARD_MODES),
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
        read.whole_number,
        "run every test that has none of the plugin's markers as if marked "
        "cudagraph_thread(threads=N, tls=--cudagraph-tls), its settings as in the main thread; "
        "0 (the default): off",
        "default for --cudagraph-threads",
        argparse={"metavar": "N"},
    ),
    "tls": Declared(
        read.one_of(TLS_MODES),
        "the tls= of the threads that --cudagraph-threads applies (default native)",
        "default for --cudagraph-tls",
        argparse={"metavar": "{native,init}"},
    ),
    "subprocess": Declared(
        read.boolean,
        "run every test that has none of the plugin's markers as if marked "
        "cudagraph_subprocess(), its settings as in the main process: a test that crashes the "
        "interpreter fails alone",
        "default for --cudagraph-subprocess (true or false)",
        argparse={"action": "store_true"},
    ),
    "on": Declared(
        read.boolean,
        "run every test with triton.cudagraphs and triton.cudagraph_trees on (an audit of a "
        "suite under CUDA graphs), in its threads or process too",
        "default for --cudagraph-on (true or false)",
        argparse={"action": "store_true"},
    ),
    "timeout": Declared(
        read.seconds,
        "the default timeout of both markers and of the options that apply them. Default: ini "
        f"cudagraph_timeout, else {ThreadOptions().timeout:g} s for {THREAD_MARKER} and "
        f"{SubprocessOptions().timeout:g} s for {SUBPROCESS_MARKER}",
        "default for --cudagraph-timeout",
        argparse={"metavar": "SECONDS"},
    ),
    "fail_on": Declared(
        read.kinds_of(FAIL_ON_KINDS),
        "fail a test, at teardown, whose record holds one of these kinds: "
        + ", ".join(FAIL_ON_KINDS)
        + ". Default: ini cudagraph_fail_on, else none",
        "default for --cudagraph-fail-on",
        argparse={"metavar": "KIND[,KIND...]"},
    ),
    "cuda_ahead": Declared(
        read.boolean,
        None,
        "test processes that cudagraph_subprocess sets up ahead initialise CUDA before their "
        "test, once the session's tests have shown they use it (true or false; default true)",
    ),
    "spares": Declared(
        read.spares,
        None,
        "how many test processes cudagraph_subprocess sets up ahead: a whole number, or auto "
        "(the default: one, and once the session's tests use CUDA as many as the cores and "
        "the GPU's free memory allow, at most 8)",
    ),
    "process_env": Declared(
        read.environment,
        None,
        "lines of NAME=VALUE set in every test process of cudagraph_subprocess and "
        "--cudagraph-subprocess before it initialises CUDA (e.g. CUDA_DEVICE_MAX_CONNECTIONS=1); "
        "a marker's env= wins",
        "linelist",
    ),
    "gpus": Declared(
        read.gpus,
        "the GPUs of the host that xdist workers and the plugin's test processes get, through "
        "CUDA_VISIBLE_DEVICES: auto (every GPU where there are several; one GPU: nothing "
        "changes), a number of GPUs, device indices I,I,... or off. Default: ini "
        "cudagraph_gpus, else auto",
        "default for --cudagraph-gpus",
        argparse={"metavar": "{auto,N,I[,I...],off}"},
    ),
    "settings": Declared(
        read.boolean,
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
