"""Untrusted text (column names, values, paths, properties, messages quoting them) in human-readable output.

``text``: control characters (C0, DEL, C1, the Unicode line and paragraph separators, bidirectional overrides)
shown escaped (``\\n``, ``\\x1b``, ``\\u202e``), so a name cannot forge a line, clear a screen or reorder what a
reader sees. ``markdown`` and ``code`` also escape what markdown would interpret (emphasis, links and images,
inline HTML, table cells); ``html`` escapes for HTML. JSON output takes none of them: it stays exact.
"""

from __future__ import annotations

import html as _html
import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Inline markdown (CommonMark and GFM): escapes, code, emphasis, links and images, autolinks and HTML, entities,
# strikethrough, table cells. Values never start a line (block syntax needs that), so '#', '-', '+', '.' stay.
_MARKDOWN = re.compile(r"([\\`*_\[\]<>&|~!])")


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def text(value: object) -> str:
    """``value`` as text with control characters escaped: one line, printing nothing a terminal acts on."""
    return _CONTROL.sub(_escaped, str(value))


def markdown(value: object) -> str:
    """``value`` as literal markdown text (control characters escaped, then markdown metacharacters)."""
    return _MARKDOWN.sub(r"\\\1", text(value))


def code(value: object) -> str:
    """``value`` as a markdown code span, safe in a table cell: a backtick fence longer than any run in the value,
    and ``|`` escaped (GFM splits cells before it reads code spans)."""
    shown = text(value)
    longest = max((len(run) for run in re.findall("`+", shown)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") or not shown.strip() else ""
    return f"{fence}{pad}{shown.replace('|', chr(92) + '|')}{pad}{fence}"


def html(value: object) -> str:
    """``value`` as HTML element content or attribute (control characters escaped, then HTML)."""
    return _html.escape(text(value), quote=True)
