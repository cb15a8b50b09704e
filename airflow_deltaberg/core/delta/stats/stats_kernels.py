"""The compiled passes of the stats template decoder (``stats_template``): imported only where parsing repays numba's
start (~0.3 s import, ~0.4 s to load the cached machine code; see ``stats_template.WORTH_BYTES``).

Written for the machine code they become: the fixed text is compared over slices without an early exit (the loop
vectorizes), an integer is summed as its digits are found (a 19-digit one, rare, is summed again exactly), and a
timestamp is checked position by position."""

from __future__ import annotations

import numba
import numpy as np

from airflow_deltaberg.core.delta.stats.stats_slots import BOOL, INT, NUM, STR, TS

_jit = numba.njit(nogil=True, cache=True, boundscheck=False)
# Helpers inlined at the IR level: a call would pass whole array structs.
_inline = numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")



@_inline
def _digits(data, p, stop):  # type: ignore[no-untyped-def]
    while p < stop and 48 <= data[p] <= 57:
        p += 1
    return p


@_inline
def _number_end(data, p, stop):  # type: ignore[no-untyped-def]
    """End of a JSON number starting at p, or -1."""
    if p < stop and data[p] == 45:
        p += 1
    start = p
    p = _digits(data, p, stop)
    if p == start or (data[start] == 48 and p - start > 1):
        return -1
    if p < stop and data[p] == 46:
        frac = p + 1
        p = _digits(data, frac, stop)
        if p == frac:
            return -1
    if p < stop and (data[p] == 101 or data[p] == 69):
        p += 1
        if p < stop and (data[p] == 43 or data[p] == 45):
            p += 1
        exp = p
        p = _digits(data, exp, stop)
        if p == exp:
            return -1
    return p


@_inline
def _string_end(data, p, stop):  # type: ignore[no-untyped-def]
    """Index of the closing quote of a string without escapes or control characters whose text starts at p, or
    -1."""
    while p < stop:
        c = data[p]
        if c == 34:
            return p
        if c == 92 or c < 32:
            return -1
        p += 1
    return -1


@_inline
def _two(data, p):  # type: ignore[no-untyped-def]
    return (data[p] - 48) * 10 + (data[p + 1] - 48)


@_inline
def _timestamp_end(data, p, stop):  # type: ignore[no-untyped-def]
    """End (before an optional Z) of a valid time ``YYYY-MM-DDTHH:MM:SS[.f{1,6}]`` at p, or -1."""
    if p + 19 > stop:
        return -1
    not_digit = False
    for i in (0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18):
        not_digit |= np.uint8(data[p + i] - 48) > 9
    if not_digit or data[p + 4] != 45 or data[p + 7] != 45 or data[p + 10] != 84 or data[p + 13] != 58 \
            or data[p + 16] != 58:
        return -1
    month = _two(data, p + 5)
    day = _two(data, p + 8)
    hour = _two(data, p + 11)
    # minutes and seconds: a first digit of at most 5
    if month < 1 or month > 12 or day < 1 or hour > 23 or data[p + 14] > 53 or data[p + 17] > 53:
        return -1
    if day > 28:
        year = _two(data, p) * 100 + _two(data, p + 2)
        if month == 2:
            days = 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
        elif month == 4 or month == 6 or month == 9 or month == 11:
            days = 30
        else:
            days = 31
        if day > days:
            return -1
    p += 19
    if p < stop and data[p] == 46:
        frac = p + 1
        p = _digits(data, frac, stop)
        if p == frac or p - frac > 6:
            return -1
    return p


@_inline
def _timestamp_micros(data, p, end):  # type: ignore[no-untyped-def]
    """Microseconds since 1970-01-01T00:00:00 of the valid time ``YYYY-MM-DDTHH:MM:SS[.f{1,6}]`` at p (ending at
    end), in the proleptic Gregorian calendar (as pyarrow's cast reads it, year 0000 included)."""
    year = _two(data, p) * 100 + _two(data, p + 2)
    month = _two(data, p + 5)
    day = _two(data, p + 8)
    # Days from the civil date (H. Hinnant's algorithm; // floors, as the era of a year before 0 needs).
    y = year - 1 if month <= 2 else year
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month - 3 if month > 2 else month + 9) + 2) // 5 + day - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    seconds = ((days * 24 + _two(data, p + 11)) * 60 + _two(data, p + 14)) * 60 + _two(data, p + 17)
    micros = 0
    scale = 1000000
    for i in range(p + 20, end):  # the fraction's digits, at most 6
        scale //= 10
        micros += (data[i] - 48) * scale
    return seconds * 1000000 + micros


@_inline
def _literal_end(data, p, stop):  # type: ignore[no-untyped-def]
    """End of true, false or null at p, or -1."""
    if p + 4 <= stop and ((data[p] == 116 and data[p + 1] == 114 and data[p + 2] == 117 and data[p + 3] == 101)
                          or (data[p] == 110 and data[p + 1] == 117 and data[p + 2] == 108 and data[p + 3] == 108)):
        return p + 4
    if p + 5 <= stop and data[p] == 102 and data[p + 1] == 97 and data[p + 2] == 108 and data[p + 3] == 115 \
            and data[p + 4] == 101:
        return p + 5
    return -1


@_jit
def scan(data, offsets, fixed, fixed_offsets, kinds, lo, hi, spans, ints, ok):  # type: ignore[no-untyped-def]
    """Check row ``r`` (``data[offsets[r]:offsets[r + 1]]``) against the template (fixed text ``fixed`` cut at
    ``fixed_offsets``, slot kinds ``kinds``): ``ok[r]``; INT, BOOL and TS (microseconds) values into ``ints[r]``,
    the text of the other values (without quotes) at ``spans[r, slot]``."""
    n = offsets.shape[0] - 1
    slots = kinds.shape[0]
    for r in range(n):
        p = offsets[r]
        stop = offsets[r + 1]
        good = True
        for s in range(slots + 1):
            a = fixed_offsets[s]
            length = fixed_offsets[s + 1] - a
            if p + length > stop:
                good = False
                break
            text = data[p:p + length]
            piece = fixed[a:a + length]
            differ = np.uint8(0)
            for i in range(length):
                differ |= text[i] ^ piece[i]
            if differ:
                good = False
                break
            p += length
            if s == slots:
                break
            kind = kinds[s]
            if kind == INT:  # -?(0|[1-9][0-9]*) within [lo, hi]
                negative = p < stop and data[p] == 45
                if negative:
                    p += 1
                start = p
                value = 0
                while p < stop:
                    digit = np.uint8(data[p] - 48)
                    if digit > 9:
                        break
                    value = value * 10 + digit  # wraps beyond 19 digits: such values are refused below
                    p += 1
                count = p - start
                if count == 0 or count > 19 or (data[start] == 48 and count > 1):
                    good = False
                    break
                if count == 19:
                    value = 0
                    for i in range(start, p - 1):  # 18 digits: no overflow
                        value = value * 10 + (data[i] - 48)
                    last = data[p - 1] - 48
                    # beyond 9223372036854775807, or 9223372036854775808 for a negative, is beyond int64
                    if value > 922337203685477580 or (value == 922337203685477580 and last > 7 + negative):
                        good = False
                        break
                    value = -(value * 10) - last if negative else value * 10 + last
                elif negative:
                    value = -value
                if value < lo[s] or value > hi[s]:
                    good = False
                    break
                ints[r, s] = value
            elif kind == NUM:
                end = _number_end(data, p, stop)
                if end < 0:
                    good = False
                    break
                spans[r, s, 0] = p
                spans[r, s, 1] = end
                p = end
            elif kind == STR or kind == TS:
                if p >= stop or data[p] != 34:
                    good = False
                    break
                if kind == STR:
                    end = _string_end(data, p + 1, stop)
                    if end < 0:
                        good = False
                        break
                    spans[r, s, 0] = p + 1
                    spans[r, s, 1] = end
                else:  # a time's characters need no escape: checked in place, then the closing quote
                    value_end = _timestamp_end(data, p + 1, stop)
                    end = value_end + 1 if value_end >= 0 and value_end < stop and data[value_end] == 90 else value_end
                    if value_end < 0 or end >= stop or data[end] != 34:
                        good = False
                        break
                    # With or without its Z, the reader gives the time as UTC (it reads an offset-less time as UTC).
                    ints[r, s] = _timestamp_micros(data, p + 1, value_end)
                p = end + 1
            elif kind == BOOL:
                end = _literal_end(data, p, stop)
                if end < 0 or data[p] == 110:  # null is not a bool
                    good = False
                    break
                ints[r, s] = data[p] == 116
                p = end
            else:  # a field the stats type does not have: the reader ignores any JSON scalar there
                if p < stop and data[p] == 34:
                    end = _string_end(data, p + 1, stop)
                    if end >= 0:
                        end += 1
                else:
                    end = _literal_end(data, p, stop)
                    if end < 0:
                        end = _number_end(data, p, stop)
                if end < 0:
                    good = False
                    break
                p = end
        ok[r] = good and p == stop


#: Values are copied 16 bytes at a time (a fixed count compiles to a few wide moves, a value's own length to a
#: mispredicted loop); each slot's region is followed by this much slack for the last copy's overshoot.
_COPY = 16


@_jit
def gather(data, spans, rows, text_slots):  # type: ignore[no-untyped-def]
    """The cut-out values of ``text_slots`` for ``rows``, each slot's in a region of one buffer, and each slot's int32
    offsets into it. Both passes go row by row (the spans and the text are read in order)."""
    m = rows.shape[0]
    k = text_slots.shape[0]
    cursor = np.zeros(k, dtype=np.int64)
    for i in range(m):
        r = rows[i]
        for j in range(k):
            s = text_slots[j]
            cursor[j] += spans[r, s, 1] - spans[r, s, 0]
    total = 0
    for j in range(k):
        size = cursor[j]
        cursor[j] = total
        total += size + _COPY
    offsets = np.empty((k, m + 1), dtype=np.int32)
    out = np.empty(total, dtype=np.uint8)
    end = data.shape[0]
    for i in range(m):
        r = rows[i]
        for j in range(k):
            s = text_slots[j]
            start = spans[r, s, 0]
            length = spans[r, s, 1] - start
            o = cursor[j]
            offsets[j, i] = o
            # Each copy may overrun the value by up to _COPY - 1 bytes: into this slot's next values (written
            # after it) or its slack.
            copied = 0
            while copied < length:
                if start + copied + _COPY <= end:
                    for b in range(_COPY):
                        out[o + copied + b] = data[start + copied + b]
                else:
                    for b in range(length - copied):
                        out[o + copied + b] = data[start + copied + b]
                copied += _COPY
            cursor[j] = o + length
    for j in range(k):
        offsets[j, m] = cursor[j]
    return out, offsets
