"""Z85 (ZeroMQ RFC 32) base85, as Delta uses it for deletion vector ids and inline deletion vectors.

Every 5 characters encode 4 bytes as a big-endian 32-bit number in base 85. Delta pads data to a multiple of
4 bytes before encoding; the descriptor's ``sizeInBytes`` gives the true length.

Writers built on the Rust ``z85`` crate (delta-rs test tables, e.g. the fixture cdf-table-with-dv) end short
data with a tail chunk instead: ``k`` leading ``#`` (1 to 3; no valid chunk starts with ``#``, as 84 * 85**4 >
2**32) and then ``5 - k`` digits holding the last ``4 - k`` bytes as one big-endian number. delta-kernel-rs
reads them so; this decoder does too.
"""

from __future__ import annotations

import uuid

import numpy as np

ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_INVALID = 255
_DIGITS = np.full(256, _INVALID, dtype=np.uint8)
_DIGITS[np.frombuffer(ALPHABET, dtype=np.uint8)] = np.arange(85, dtype=np.uint8)
_POWERS = 85 ** np.arange(4, -1, -1, dtype=np.uint64)
_CHARS = np.frombuffer(ALPHABET, dtype=np.uint8)


def z85_decode(text: str) -> bytes:
    """The bytes that ``text`` (a multiple of 5 Z85 characters) encodes; ValueError when it is not Z85."""
    padding = _tail_padding(text)
    if padding:
        head = _decode_chunks(text[:-5])
        value = int(_decode_chunks("0" * padding + text[-5 + padding :]).hex(), 16)
        if value >= 1 << (8 * (4 - padding)):
            raise ValueError(f"the Z85 tail chunk {text[-5:]!r} encodes more than {4 - padding} bytes")
        return head + value.to_bytes(4 - padding, "big")
    return _decode_chunks(text)


def _tail_padding(text: str) -> int:
    tail = text[-5:]
    padding = len(tail) - len(tail.lstrip("#"))
    return padding if len(text) % 5 == 0 and 0 < padding < 4 else 0


def _decode_chunks(text: str) -> bytes:
    try:
        raw = text.encode("ascii")
    except UnicodeEncodeError as exc:
        raise ValueError("Z85 text must be ASCII") from exc
    if len(raw) % 5:
        raise ValueError(f"Z85 text length {len(raw)} is not a multiple of 5")
    digits = _DIGITS[np.frombuffer(raw, dtype=np.uint8)]
    if (digits == _INVALID).any():
        bad = raw[int(np.flatnonzero(digits == _INVALID)[0])]
        raise ValueError(f"{chr(bad)!r} is not a Z85 character")
    values = digits.reshape(-1, 5).astype(np.uint64) @ _POWERS
    if (values > 0xFFFFFFFF).any():
        raise ValueError("a Z85 group encodes a value above 2**32 - 1")
    return values.astype(">u4").tobytes()


def z85_uuid(text: str) -> uuid.UUID:
    """The UUID that 20 Z85 characters encode (16 bytes, most significant first)."""
    if len(text) != 20:
        raise ValueError(f"an encoded UUID has 20 characters, got {len(text)}")
    return uuid.UUID(bytes=z85_decode(text))
