"""The one redaction rule: storage option secrets and URL credentials out of messages, logs and errors."""

from __future__ import annotations

import logging
from urllib.parse import quote

import pytest

from airflow_deltaberg.core import display
from airflow_deltaberg.core.errors import CorruptLogError
from airflow_deltaberg.core.redact import (
    MASK,
    Redactor,
    is_secret_header,
    location_secrets,
    location_text,
    masked_options,
    option_secrets,
    redact,
    redacting_logs,
    redactor_for,
    secret_values,
    strip_userinfo,
)
from airflow_deltaberg.core.storage import S3_CONFIG_DEFAULTS, _client_options

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


def test_secret_values_at_any_depth() -> None:
    options = {"key": "AKIAEXAMPLE", "endpoint_url": "http://minio:9000",
               "client_kwargs": {"aws_secret_access_key": SECRET},
               "token": {"type": "service_account", "private_key": "-----BEGIN KEY-----xyz"}, "anon": False}
    assert sorted(secret_values(options)) == sorted(["AKIAEXAMPLE", SECRET, "service_account",
                                                     "-----BEGIN KEY-----xyz"])


def test_redact_replaces_every_spelling_of_a_secret() -> None:
    text = f"plain {SECRET}, in a query ?token={quote(SECRET, safe='')}, in a path /{quote(SECRET)}/"
    redacted = redact(text, [SECRET])
    assert SECRET not in redacted and quote(SECRET, safe="") not in redacted and quote(SECRET) not in redacted
    assert redacted.count(MASK) == 3


def test_a_secret_shown_escaped_is_masked_too() -> None:
    """Human-readable output escapes what it shows (core.display): a secret holding a control character or a
    markdown or HTML metacharacter must be masked in its escaped spelling too."""
    secret = "ab_c*d<e>&\x1bf\ng"
    for shown in (display.text(secret), display.markdown(secret), display.html(secret)):
        assert shown != secret
        assert redact(f"message: {shown}.", [secret]) == f"message: {MASK}."


def test_short_values_are_not_secrets() -> None:
    """As Airflow's masker: a value under 5 characters is not masked (it would garble every message)."""
    assert redact("region 1 of 1", ["1"]) == "region 1 of 1"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("s3://KEY:SECRET@bucket/t", "s3://***@bucket/t"),
        ("see https://user:pass@host:8443/x and s3://b/t", "see https://***@host:8443/x and s3://b/t"),
        ("abfss://container@account.dfs.core.windows.net/t", "abfss://container@account.dfs.core.windows.net/t"),
        ("abfss://container:sas@account.dfs.core.windows.net/t", "abfss://container:***@account.dfs.core.windows.net/t"),
        ("no url here: a@b", "no url here: a@b"),
    ],
)
def test_strip_userinfo(text: str, shown: str) -> None:
    assert strip_userinfo(text) == shown


def test_a_location_whose_secret_holds_a_slash() -> None:
    """AWS secret keys hold '/', which ends a URL's authority early: the location rule still finds them."""
    location = f"s3://AKIAEXAMPLE:{SECRET}@bucket/t"
    assert location_secrets(location) == ["AKIAEXAMPLE", SECRET]
    assert location_text(location) == "s3://***@bucket/t"
    assert location_secrets("s3://bucket/a@b/t") == [] and location_text("s3://bucket/a@b/t") == "s3://bucket/a@b/t"
    assert redactor_for(location)(f"botocore: bucket name 'AKIAEXAMPLE:{SECRET}@bucket'") == \
        "botocore: bucket name '***:***@bucket'"


def test_delta_errors_show_the_location_without_credentials() -> None:
    error = CorruptLogError("bad", table="s3://KEY:SECRET@bucket/t", version=3,
                            file="s3://KEY:SECRET@bucket/t/_delta_log/00000000000000000003.json")
    assert error.table == "s3://***@bucket/t" and error.file is not None and "SECRET" not in error.file
    assert "SECRET" not in str(error) and "KEY" not in str(error)


def test_the_logging_filter_redacts_messages_arguments_and_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    logger = logging.getLogger("botocore.endpoint")
    with redacting_logs(Redactor([SECRET])):
        logger.debug("request %s", {"Authorization": f"Bearer {SECRET}"})
        try:
            raise RuntimeError(f"failed with {SECRET}")
        except RuntimeError:
            logger.exception("oops")
    logger.debug("after %s", SECRET)  # the filter is gone again
    assert [r.getMessage() for r in caplog.records[:2]] == ["request {'Authorization': 'Bearer ***'}", "oops"]
    assert SECRET not in caplog.records[1].exc_text and "failed with ***" in caplog.records[1].exc_text
    assert caplog.records[2].getMessage() == f"after {SECRET}"
    assert not any(isinstance(f, logging.Filter) and type(f).__name__ == "RedactingFilter"
                   for h in logging.getLogger().handlers for f in h.filters)


def test_s3_client_defaults_give_way_to_the_users_options() -> None:
    assert _client_options("s3", {})["config_kwargs"] == S3_CONFIG_DEFAULTS
    mine = _client_options("s3", {"config_kwargs": {"retries": {"max_attempts": 10}, "read_timeout": 60}})
    assert mine["config_kwargs"] == {"connect_timeout": 5, "retries": {"max_attempts": 10}, "read_timeout": 60}
    assert "config_kwargs" not in _client_options("memory", {})


def test_a_raw_gcs_token_for_an_explicit_endpoint_is_used_as_it_is() -> None:
    from google.oauth2.credentials import Credentials

    with_endpoint = _client_options("gs", {"token": SECRET, "endpoint_url": "http://localhost:4443"})
    assert isinstance(with_endpoint["token"], Credentials) and with_endpoint["token"].token == SECRET
    assert _client_options("gs", {"token": SECRET})["token"] == SECRET  # Google's endpoint: gcsfs checks it there
    assert _client_options("gs", {"token": "anon", "endpoint_url": "http://localhost:4443"})["token"] == "anon"


def test_option_secrets_are_the_values_under_secret_names_and_url_passwords() -> None:
    keyfile = {"type": "service_account", "private_key": "-----BEGIN KEY-----xyz"}
    options = {"key": "AKIAEXAMPLE", "token": keyfile, "endpoint_url": "http://minio:9000", "empty_secret": "",
               "uri": "postgresql://user:pg-pass-1@db/catalog", "nested": {"password": "pw-2"}, "anon": False}
    assert option_secrets(options) == ["AKIAEXAMPLE", keyfile, "pg-pass-1", "pw-2"]
    # their strings, for text redaction: a URL's password too
    assert secret_values(options) == ["AKIAEXAMPLE", "service_account", "-----BEGIN KEY-----xyz", "pg-pass-1", "pw-2"]


def test_masked_options_for_logs() -> None:
    options = {"uri": "postgresql+psycopg2://user:pg-pass-1@db:5432/c", "credential": "c:s",
               "client_kwargs": {"aws_secret_access_key": SECRET, "region_name": "eu"},
               "list": [{"token": "t-3"}, "plain"], "warehouse": "s3://bucket/wh"}
    masked = masked_options(options)
    assert masked == {"uri": "postgresql+psycopg2://user:***@db:5432/c", "credential": MASK,
                      "client_kwargs": {"aws_secret_access_key": MASK, "region_name": "eu"},
                      "list": [{"token": MASK}, "plain"], "warehouse": "s3://bucket/wh"}
    assert options["credential"] == "c:s"  # a copy


@pytest.mark.parametrize(("name", "secret"), [("Authorization", True), ("proxy-authorization", True),
                                              ("Cookie", True), ("X-Api-Key", True), ("X-Auth-Token", True),
                                              ("Content-Type", False), ("X-Team", False)])
def test_secret_headers(name: str, secret: bool) -> None:
    assert is_secret_header(name) is secret
