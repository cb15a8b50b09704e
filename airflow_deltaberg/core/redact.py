"""Secrets out of messages: storage option values and the credentials of URLs.

One rule for every message, log line and document the project shows: the values held under secret option names
(``key``, ``secret``, ``token``, ``account_key``, ``connection_string``, ... at any depth, see ``is_secret_key``)
and the user information of URLs (``s3://KEY:SECRET@bucket``) are replaced by ``***``. Values shorter than
``MIN_SECRET_LENGTH`` characters are left alone, as Airflow's secrets masker does: masking every "a" or "1" would
garble messages and protect nothing.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit

from airflow_deltaberg.core import display

SECRET_MARKERS = ("secret", "key", "token", "password", "credential", "connection_string")
MASK = "***"
#: HTTP header names (lower case) whose values are secrets, besides those ``is_secret_key`` matches.
SECRET_HEADERS = ("authorization", "proxy-authorization", "cookie", "auth")
#: Airflow's default ``[logging] min_length_masked_secret``.
MIN_SECRET_LENGTH = 5
# Azure locations name the container in the user part (abfss://container@account.dfs.core.windows.net/...):
# there only a part after ':' is a credential.
_CONTAINER_SCHEMES = frozenset({"abfs", "abfss", "az", "adl", "wasb", "wasbs"})
# Object stores whose bucket names hold neither ':' nor '@'.
_BUCKET_SCHEMES = frozenset({"s3", "s3a", "s3n", "gs", "gcs"})
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://(?P<userinfo>[^/?#@\s\"']+)@")


def is_secret_key(key: object) -> bool:
    """Whether an option name holds a secret (compared case-insensitively)."""
    lowered = str(key).lower()
    return any(marker in lowered for marker in SECRET_MARKERS)


def is_secret_header(name: object) -> bool:
    """Whether an HTTP header carries a secret (``Authorization``, ``Cookie``, ``X-Api-Key``, ...)."""
    return str(name).lower() in SECRET_HEADERS or is_secret_key(name)


def url_password(value: object) -> str | None:
    """The password of a URL (``postgresql://user:PASSWORD@host/db``); None for other values."""
    if not isinstance(value, str) or "://" not in value:
        return None
    try:
        return urlsplit(value).password or None
    except ValueError:
        return None


def option_secrets(options: Mapping[Any, Any] | None) -> list[Any]:
    """The secrets of options (storage options, catalog properties), as they are: the values held under secret
    names at any depth (a mapping whole, e.g. a key file) and the passwords of URL values."""
    found: list[Any] = []

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                if is_secret_key(k):
                    if v:
                        found.append(v)
                else:
                    walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif (password := url_password(value)) is not None:
            found.append(password)

    walk(options or {})
    return found


def masked_options(options: Mapping[Any, Any]) -> dict[Any, Any]:
    """A copy of options fit for logs: values under secret names at any depth and URL passwords are ``***``."""

    def masked(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: MASK if is_secret_key(k) else masked(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(masked(v) for v in value)
        password = url_password(value)
        if password is not None:
            return value.replace(f":{password}@", f":{MASK}@", 1)
        return value

    return masked(options)


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, Mapping):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, (str, bytes)):
        yield value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def secret_values(options: Mapping[Any, Any] | None) -> list[str]:
    """The strings among the secrets of options (``option_secrets``): a key file under ``token``, all of it."""
    return [leaf for secret in option_secrets(options) for leaf in _leaves(secret)]


def url_secrets(text: str) -> list[str]:
    """The credentials found in the URLs of ``text`` (password, and the user part but of Azure containers), as
    written and percent-decoded."""
    found: list[str] = []
    for match in _USERINFO.finditer(text):
        user, sep, password = match["userinfo"].partition(":")
        if sep:
            found.append(password)
        if match["scheme"].lower() not in _CONTAINER_SCHEMES:
            found.append(user)
    return _spellings(found)


def _spellings(found: Iterable[str]) -> list[str]:
    out: list[str] = []
    for secret in found:
        for spelling in (secret, unquote(secret)):
            if spelling and spelling not in out:
                out.append(spelling)
    return out


def _bucket_credentials(location: str) -> tuple[str, str] | None:
    """(user info, the rest) of an object store location whose user info holds a '/' (AWS secret keys do), which
    ends a URL's authority early: ``s3://KEY:SE/CRET@bucket/t``. Bucket names hold no ':', so a ':' before the
    first '/' and an '@' after it can only be credentials there."""
    scheme, sep, rest = location.partition("://")
    if not sep or scheme.lower() not in _BUCKET_SCHEMES:
        return None
    authority = rest.split("/", 1)[0]
    at = rest.rfind("@")
    if ":" not in authority or "@" in authority or at < 0:
        return None
    return rest[:at], rest[at + 1 :]


def location_secrets(location: str) -> list[str]:
    """The credentials written into a table location URL (see ``url_secrets``; also those holding a '/')."""
    bucket = _bucket_credentials(location)
    if bucket is not None:
        user, _, password = bucket[0].partition(":")
        return _spellings([user, password])
    return url_secrets(location)


def location_text(location: str) -> str:
    """A location as messages show it: without the credentials of its URL."""
    bucket = _bucket_credentials(location)
    if bucket is not None:
        return f"{location.partition('://')[0]}://{MASK}@{bucket[1]}"
    return strip_userinfo(location) if "@" in location else location


def strip_userinfo(text: str) -> str:
    """``text`` with the credentials of its URLs replaced by ``***`` (an Azure container name is kept)."""

    def replace(match: re.Match[str]) -> str:
        scheme, userinfo = match["scheme"], match["userinfo"]
        user, sep, _ = userinfo.partition(":")
        if scheme.lower() in _CONTAINER_SCHEMES:
            return f"{scheme}://{user}:{MASK}@" if sep else match.group(0)
        return f"{scheme}://{MASK}@"

    return _USERINFO.sub(replace, text)


class Redactor:
    """Replaces given secrets (and their URL-encoded spellings) and URL credentials in text."""

    def __init__(self, secrets: Iterable[str] = ()):
        spellings: set[str] = set()
        for secret in secrets:
            if not isinstance(secret, str) or len(secret) < MIN_SECRET_LENGTH:
                continue
            # A secret shows up as is, or URL-encoded when a client put it into a request URL, or escaped where
            # human-readable output shows it (core.display).
            spellings.update({secret, quote(secret, safe=""), quote_plus(secret, safe=""), quote(secret),
                              display.text(secret), display.markdown(secret), display.html(secret)})
        # Longest first: a secret that contains another is replaced whole.
        ordered = sorted(spellings, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(s) for s in ordered)) if ordered else None

    def __call__(self, text: str) -> str:
        # Secrets first: a known one holding a '/' ends a URL's user part early, which hides it from strip_userinfo.
        text = self._pattern.sub(MASK, text) if self._pattern is not None else text
        return strip_userinfo(text)


def redactor_for(location: str | None = None, storage_options: Mapping[Any, Any] | None = None,
                 extra: Iterable[str] = ()) -> Redactor:
    """The redactor of a table: its storage options' secrets and the credentials of its location URL."""
    return Redactor([*secret_values(storage_options), *location_secrets(location or ""), *extra])


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without ``secrets`` (nor their URL-encoded forms) and without the credentials of its URLs."""
    return Redactor(secrets)(text)


class RedactingFilter(logging.Filter):
    """A logging filter that rewrites each record's message (and its formatted exception) without secrets.

    Installed on handlers, it sees the records of every logger (botocore, urllib3, gcsfs, ...) that reach them.
    """

    def __init__(self, redactor: Redactor):
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string: show the template, never fail the log call
            message = str(record.msg)
        record.msg, record.args = self.redactor(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor(record.stack_info)
        return True


@contextlib.contextmanager
def redacting_logs(redactor: Redactor, logger: logging.Logger | None = None) -> Iterator[None]:
    """Redact every record that reaches the handlers of ``logger`` (the root logger by default) meanwhile.

    With no handler there (Python then prints warnings through its last-resort handler, which takes no filter),
    a stderr handler that prints as the last-resort one does is installed for the time being.
    """
    target = logger or logging.getLogger()
    log_filter = RedactingFilter(redactor)
    added: logging.Handler | None = None
    if not target.handlers:
        added = logging.StreamHandler()
        added.setLevel(logging.WARNING)
        target.addHandler(added)
    handlers = list(target.handlers)
    for handler in handlers:
        handler.addFilter(log_filter)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(log_filter)
        if added is not None:
            target.removeHandler(added)
