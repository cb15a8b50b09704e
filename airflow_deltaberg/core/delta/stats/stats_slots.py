"""The kinds of value slot in a stats template: how the stats decoder (``stats_template``) reads a value, and the
switch of its compiled scan (``stats_kernels``)."""

from __future__ import annotations

#: A JSON integer within its field's range.
INT = 0
#: A JSON number, converted by pyarrow's cast.
NUM = 1
#: A JSON string without escapes.
STR = 2
#: A JSON string holding a valid time ``YYYY-MM-DDTHH:MM:SS[.ffffff][Z]``, read by the scan as microseconds.
TS = 3
#: true or false.
BOOL = 4
#: A field the stats type does not have: any JSON scalar, ignored.
SKIP = 5
