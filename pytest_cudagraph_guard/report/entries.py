"""A record's entries as text, the same in every format: torch's messages cut to one line, its
CPU-only skip said as such, and the identical entries of several threads as one group
(``skip x4 [drafter-0..3]: ...``). Read by :mod:`.render` and :mod:`.junit`."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from ..core.entries import ErrorEntry, LeakEntry
from ..core.kinds import FINDING_KINDS, PLUGIN_ERROR, UNCLASSIFIED
from ..core.options import CUDAGRAPH_SKIP, LEAK
from ..core.records import CompiledEntry, SkipEntry, TestRecord

# torch's reason when a graph's only device is the CPU: it names the devices other than the CPU,
# and there are none.
CPU_ONLY_SKIP: Final = "skipping cudagraphs due to multiple devices:"
CPU_SKIP_TEXT: Final = (
    "skipping cudagraphs: the graph runs on CPU tensors "
    '(torch says "multiple devices:" with no device)'
)
NO_MESSAGE: Final = "(no message)"
_PLACEHOLDER: Final = "\x00"  # stands for an entry's own thread while entries are compared
_NUMBERED: Final = re.compile(r"^(.*?)(\d+)$")


def kind_name(kind: str | None) -> str:
    return UNCLASSIFIED if kind is None else kind


def entry_label(kind: str | None) -> str:
    """What an entry is to the user: an ``error`` fails a test, a ``finding`` does not by itself,
    a ``note`` is the plugin's own failure."""
    if kind == PLUGIN_ERROR:
        return "note"
    return "finding" if kind in FINDING_KINDS else "error"


def first_line(text: str) -> str:
    """The first line that says something (torch's messages often start with a newline)."""
    for line in text.splitlines():
        if line.strip():
            return line.rstrip()
    return ""


def skip_text(reason: str) -> str:
    line = first_line(reason)
    return CPU_SKIP_TEXT if line.strip() == CPU_ONLY_SKIP else line


def leak_text(leak: LeakEntry) -> str:
    alias_of = leak.alias_of
    key = f"{leak.key} (alias of {alias_of.rsplit('.', 1)[-1]})" if alias_of else leak.key
    return f"{key}: {leak.before!r} -> {leak.after!r}"


@dataclass(frozen=True)
class Group:
    """Entries of a record equal but for their thread, in the order first seen (one entry is a
    group of one): errors, findings or notes, leaks or CUDA-graph skips."""

    label: str  # error, finding, note, leak, skip
    threads: tuple[str, ...]  # none: no thread to name (a leak)
    text: str  # one line; the threads' own names in it stand for the group's label
    kind: str  # the name --cudagraph-fail-on and JUnit use: unclassified for an error of no kind
    hint: str | None = None

    @property
    def count(self) -> int:
        return max(len(self.threads), 1)

    @property
    def gist(self) -> int:
        """How many characters at the start of ``text`` a cut keeps: for a finding (whose
        message the plugin writes with its gist first, up to its first ": "), the type and
        that gist; else none."""
        if self.kind not in FINDING_KINDS:
            return 0
        type_end = self.text.find(": ")
        gist_end = self.text.find(": ", type_end + 2) if type_end >= 0 else -1
        return max(gist_end, 0)

    def head(self) -> str:
        """``error x2 [drafter-0..1]``: the label, the count and the threads."""
        return self.label + self.where()

    def where(self) -> str:
        """`` x2 [drafter-0..1]``: the count and the threads."""
        times = f" x{self.count}" if self.count > 1 else ""
        return times + (f" [{thread_label(self.threads)}]" if self.threads else "")


def record_entries(record: TestRecord) -> list[Group]:
    """The record's errors, findings and notes, then its leaks, then its CUDA-graph skips."""
    return [
        *error_entries(record.errors),
        *leak_entries(record.leaks),
        *skip_entries(record.activity.skips),
    ]


def error_entries(errors: Iterable[ErrorEntry]) -> list[Group]:
    return [
        Group(
            entry_label(error.kind),
            (error.thread,),
            f"{error.type}: {first_line(error.message) or NO_MESSAGE}",
            kind_name(error.kind),
            error.hint,
        )
        for error in errors
    ]


def leak_entries(leaks: Iterable[LeakEntry]) -> list[Group]:
    return [Group("leak", (), leak_text(leak), LEAK) for leak in leaks]


def skip_entries(skips: Iterable[SkipEntry]) -> list[Group]:
    return [Group("skip", (s.thread,), skip_text(s.reason), CUDAGRAPH_SKIP) for s in skips]


def grouped(entries: Iterable[Group]) -> list[Group]:
    """Entries (groups of one) whose label, kind, text and hint are equal once their own
    thread's name is left out, as one group each."""
    order: dict[tuple[str, str, str, str | None], list[str]] = {}
    for entry in entries:
        thread = entry.threads[0] if entry.threads else None
        key = (
            entry.label,
            entry.kind,
            _without(entry.text, thread),
            None if entry.hint is None else _without(entry.hint, thread),
        )
        order.setdefault(key, []).extend(entry.threads)
    groups = []
    for (label, kind, text, hint), threads in order.items():
        name = thread_label(threads) if threads else ""
        groups.append(
            Group(
                label,
                tuple(threads),
                text.replace(_PLACEHOLDER, name),
                kind,
                None if hint is None else hint.replace(_PLACEHOLDER, name),
            )
        )
    return groups


def _without(text: str, thread: str | None) -> str:
    return text.replace(thread, _PLACEHOLDER) if thread else text


def thread_label(threads: Sequence[str]) -> str:
    """``drafter-0..3`` for drafter-0 to drafter-3; other names as they are, comma-separated."""
    runs: list[tuple[str, int, int]] = []  # prefix, first number, last number
    plain: list[str] = []
    for name in dict.fromkeys(threads):
        match = _NUMBERED.match(name)
        if match is None:
            plain.append(name)
        else:
            runs.append((match[1], int(match[2]), int(match[2])))
    runs.sort()
    merged: list[tuple[str, int, int]] = []
    for prefix, first, last in runs:
        if merged and merged[-1][0] == prefix and merged[-1][2] + 1 == first:
            merged[-1] = (prefix, merged[-1][1], last)
        else:
            merged.append((prefix, first, last))
    named = [f"{p}{a}" if a == b else f"{p}{a}..{b}" for p, a, b in merged]
    return ", ".join(plain + named)


def backends_text(compiled: Iterable[CompiledEntry]) -> str:
    """``eager 1, inductor 2``: the compiles by backend."""
    backends = Counter(c.backend for c in compiled)
    return ", ".join(f"{b} {n}" for b, n in sorted(backends.items()))


def cut(text: str, width: int, keep: int = 0) -> str:
    """``text`` in ``width`` characters at most, an ellipsis where it was cut; its first
    ``keep`` characters are kept whatever the width."""
    if len(text) <= width:
        return text
    return text[: max(width - 1, keep, 0)].rstrip() + "…"
