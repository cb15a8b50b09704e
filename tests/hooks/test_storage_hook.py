"""DeltaStorageHook: Airflow connections (from AIRFLOW_CONN_* variables) to fsspec storage options."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from airflow.exceptions import AirflowException, AirflowNotFoundException
from airflow.sdk import BaseHook
from airflow.sdk.log import redact

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import StorageError
from airflow_deltaberg.hooks import DeltaStorageHook, StorageOptions
from airflow_deltaberg.hooks import masking as masking_module

ACCESS_KEY = "AKIAEXAMPLEACCESSKEY01"
SECRET = "s3cr3t-value-that-must-never-leak-9f8e7d"
SESSION_TOKEN = "session-token-value-that-must-never-leak-1a2b"
ACCOUNT_KEY = "azure-account-key-that-must-never-leak-==="
CLIENT_SECRET = "client-secret-that-must-never-leak-42"
CONN_STRING = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=conn-string-key-never-leak"
PRIVATE_KEY = "-----BEGIN PRIVATE KEY-----\nprivate-key-that-must-never-leak\n-----END PRIVATE KEY-----\n"
KEYFILE = {
    "type": "service_account",
    "project_id": "my-project",
    "private_key_id": "private-key-id-that-must-never-leak",
    "private_key": PRIVATE_KEY,
    "client_email": "robot@my-project.iam.gserviceaccount.com",
}
ALL_SECRETS = [SECRET, SESSION_TOKEN, ACCOUNT_KEY, CLIENT_SECRET, CONN_STRING, PRIVATE_KEY,
               "private-key-that-must-never-leak", "private-key-id-that-must-never-leak", "conn-string-key"]


def set_conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, conn_type: str, **fields: Any) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": conn_type, **fields}))


def options_for(monkeypatch: pytest.MonkeyPatch, conn_type: str, **fields: Any) -> StorageOptions:
    set_conn(monkeypatch, "deltaberg_test", conn_type, **fields)
    return DeltaStorageHook("deltaberg_test").storage_options()


def assert_no_secret(text: str) -> None:
    for secret in ALL_SECRETS:
        assert secret not in text
    assert ACCESS_KEY not in text


# -- hook basics ----------------------------------------------------------------------------------


def test_hook_attributes() -> None:
    assert issubclass(DeltaStorageHook, BaseHook)
    assert DeltaStorageHook.conn_name_attr == "deltaberg_conn_id"
    assert DeltaStorageHook.default_conn_name == "deltaberg_default"
    assert DeltaStorageHook.conn_type == "deltaberg"
    assert DeltaStorageHook.hook_name == "Delta/Iceberg storage"
    assert DeltaStorageHook().deltaberg_conn_id == "deltaberg_default"
    assert "extra" not in DeltaStorageHook.get_ui_field_behaviour()["hidden_fields"]


def test_no_connection_means_default_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(conn_id: str) -> None:  # pragma: no cover - must not be called
        raise AssertionError(conn_id)

    monkeypatch.setattr(DeltaStorageHook, "get_connection", classmethod(lambda cls, conn_id: fail(conn_id)))
    options = DeltaStorageHook(None).storage_options()
    assert options == {}
    assert isinstance(options, StorageOptions)
    assert DeltaStorageHook(deltaberg_conn_id=None).get_conn() == {}


def test_missing_connection_raises_clear_error() -> None:
    with pytest.raises(AirflowNotFoundException, match="no_such_conn"):
        DeltaStorageHook("no_such_conn").storage_options()
    with pytest.raises(AirflowNotFoundException, match="deltaberg_default"):
        DeltaStorageHook().storage_options()


def test_unsupported_connection_type(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AirflowException, match=r"'deltaberg_test' has type 'postgres'.*aws") as info:
        options_for(monkeypatch, "postgres", login="user", password=SECRET, host="db")
    assert_no_secret(str(info.value))


def test_invalid_extra_json_does_not_echo_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AirflowException, match="not valid JSON") as info:
        options_for(monkeypatch, "deltaberg", extra='{"secret": "' + SECRET + '"')
    assert_no_secret(str(info.value))
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_extra_must_be_an_object(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AirflowException, match="JSON object"):
        options_for(monkeypatch, "deltaberg", extra="[1, 2]")


# -- aws ------------------------------------------------------------------------------------------


def test_aws_full(monkeypatch: pytest.MonkeyPatch) -> None:
    options = options_for(
        monkeypatch, "aws", login=ACCESS_KEY, password=SECRET,
        extra={"region_name": "eu-central-1", "endpoint_url": "http://minio:9000",
               "aws_session_token": SESSION_TOKEN},
    )
    assert options == {
        "key": ACCESS_KEY,
        "secret": SECRET,
        "token": SESSION_TOKEN,
        "endpoint_url": "http://minio:9000",
        "client_kwargs": {"region_name": "eu-central-1"},
    }


def test_aws_without_keys_uses_default_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    assert options_for(monkeypatch, "aws") == {}
    assert options_for(monkeypatch, "aws", extra={"region_name": "us-east-1"}) == {
        "client_kwargs": {"region_name": "us-east-1"}
    }


def test_aws_keys_in_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    options = options_for(
        monkeypatch, "aws", extra={"aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET}
    )
    assert options == {"key": ACCESS_KEY, "secret": SECRET}


def test_aws_role_arn_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AirflowException, match="role_arn is not supported") as info:
        options_for(monkeypatch, "aws", login=ACCESS_KEY, password=SECRET,
                    extra={"role_arn": "arn:aws:iam::123:role/x"})
    assert_no_secret(str(info.value))


def test_storage_options_extra_is_merged_last(monkeypatch: pytest.MonkeyPatch) -> None:
    options = options_for(
        monkeypatch, "aws", login=ACCESS_KEY, password=SECRET,
        extra={"storage_options": {"anon": False, "config_kwargs": {"s3": {"addressing_style": "path"}}}},
    )
    assert options["anon"] is False
    assert options["config_kwargs"] == {"s3": {"addressing_style": "path"}}
    assert options["secret"] == SECRET
    with pytest.raises(AirflowException, match="storage_options"):
        options_for(monkeypatch, "aws", extra={"storage_options": "nope"})


# -- google cloud ---------------------------------------------------------------------------------


def test_gcp_keyfile_dict_as_string(monkeypatch: pytest.MonkeyPatch) -> None:
    options = options_for(
        monkeypatch, "google_cloud_platform",
        extra={"keyfile_dict": json.dumps(KEYFILE), "project": "my-project"},
    )
    assert options == {"token": KEYFILE, "project": "my-project"}


def test_gcp_keyfile_dict_as_object_and_legacy_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    options = options_for(
        monkeypatch, "google_cloud_platform",
        extra={"extra__google_cloud_platform__keyfile_dict": KEYFILE,
               "extra__google_cloud_platform__project": "p2"},
    )
    assert options == {"token": KEYFILE, "project": "p2"}


def test_gcp_key_path(monkeypatch: pytest.MonkeyPatch) -> None:
    options = options_for(monkeypatch, "google_cloud_platform", extra={"key_path": "/secrets/sa.json"})
    assert options == {"token": "/secrets/sa.json"}


def test_gcp_default_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    assert options_for(monkeypatch, "google_cloud_platform") == {}
    assert options_for(monkeypatch, "google_cloud_platform", extra={"project": "p"}) == {"project": "p"}


def test_gcp_bad_keyfile_does_not_echo_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AirflowException, match="keyfile_dict is not valid JSON") as info:
        options_for(monkeypatch, "google_cloud_platform", extra={"keyfile_dict": PRIVATE_KEY})
    assert_no_secret(str(info.value))


# -- azure ----------------------------------------------------------------------------------------


def test_wasb_account_key(monkeypatch: pytest.MonkeyPatch) -> None:
    options = options_for(monkeypatch, "wasb", login="myaccount", password=ACCOUNT_KEY)
    assert options == {"account_name": "myaccount", "account_key": ACCOUNT_KEY}


def test_wasb_connection_string(monkeypatch: pytest.MonkeyPatch) -> None:
    options = options_for(monkeypatch, "wasb", extra={"connection_string": CONN_STRING})
    assert options == {"connection_string": CONN_STRING}


def test_adls_service_principal(monkeypatch: pytest.MonkeyPatch) -> None:
    options = options_for(
        monkeypatch, "adls", login="myaccount",
        extra={"tenant_id": "tenant", "client_id": "client", "client_secret": CLIENT_SECRET},
    )
    assert options == {
        "account_name": "myaccount", "tenant_id": "tenant", "client_id": "client",
        "client_secret": CLIENT_SECRET,
    }


def test_wasb_legacy_prefixed_extras_and_sas(monkeypatch: pytest.MonkeyPatch) -> None:
    options = options_for(
        monkeypatch, "wasb", login="acct",
        extra={"extra__wasb__sas_token": "sv=2024&sig=" + SECRET, "extra__wasb__tenant_id": "t"},
    )
    assert options == {"account_name": "acct", "sas_token": "sv=2024&sig=" + SECRET, "tenant_id": "t"}


# -- generic --------------------------------------------------------------------------------------


@pytest.mark.parametrize("conn_type", ["deltaberg", "generic"])
def test_generic_extras_pass_through(monkeypatch: pytest.MonkeyPatch, conn_type: str) -> None:
    extra = {"anon": True, "endpoint_url": "http://localhost:9000", "secret": SECRET,
             "client_kwargs": {"region_name": "x"}}
    assert options_for(monkeypatch, conn_type, extra=extra) == extra
    assert options_for(monkeypatch, conn_type) == {}


# -- secrets --------------------------------------------------------------------------------------


SECRET_CONNS: list[tuple[str, dict[str, Any]]] = [
    ("aws", {"login": ACCESS_KEY, "password": SECRET, "extra": {"aws_session_token": SESSION_TOKEN}}),
    ("google_cloud_platform", {"extra": {"keyfile_dict": json.dumps(KEYFILE)}}),
    ("wasb", {"login": "acct", "password": ACCOUNT_KEY, "extra": {"connection_string": CONN_STRING}}),
    ("adls", {"login": "acct", "extra": {"client_id": "c", "client_secret": CLIENT_SECRET}}),
    ("deltaberg", {"extra": {"aws_secret_access_key": SECRET, "nested": {"password": CLIENT_SECRET},
                             "credentials": [ACCOUNT_KEY], "region": "eu"}}),
]


@pytest.mark.parametrize(("conn_type", "fields"), SECRET_CONNS, ids=[c for c, _ in SECRET_CONNS])
def test_repr_and_str_mask_secrets(monkeypatch: pytest.MonkeyPatch, conn_type: str, fields: dict) -> None:
    options = options_for(monkeypatch, conn_type, **fields)
    assert options  # something to hide
    for text in (repr(options), str(options), f"{options}", repr([options]), repr(options.copy())):
        assert_no_secret(text)
        assert "***" in text
    assert isinstance(options.copy(), StorageOptions)
    assert dict(options) == options  # a plain dict for the core, with the real values


def test_repr_keeps_non_secret_values(monkeypatch: pytest.MonkeyPatch) -> None:
    options = options_for(monkeypatch, "aws", login=ACCESS_KEY, password=SECRET,
                          extra={"region_name": "eu-west-1", "endpoint_url": "http://minio:9000"})
    text = repr(options)
    assert text.startswith("StorageOptions(")
    assert "eu-west-1" in text and "http://minio:9000" in text
    assert "'secret': '***'" in text


@pytest.mark.parametrize(("conn_type", "fields"), SECRET_CONNS, ids=[c for c, _ in SECRET_CONNS])
def test_secrets_are_registered_with_the_masker(
    monkeypatch: pytest.MonkeyPatch, conn_type: str, fields: dict
) -> None:
    registered: list[Any] = []
    monkeypatch.setattr(masking_module, "_mask_secret", registered.append)
    options = options_for(monkeypatch, conn_type, **fields)
    assert registered == options.secrets()
    assert registered


def test_masker_redacts_registered_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    # End to end. Airflow masks the fields of a connection it loads as well; the test above is the one
    # that shows the hook registers what it derives. Unique values keep earlier masks out of the way.
    token, nested = f"token-{uuid.uuid4().hex}", f"pw-{uuid.uuid4().hex}"
    assert token in redact(f"before {token}")
    options_for(monkeypatch, "deltaberg", extra={"token": token, "client": {"password": nested}})
    assert token not in redact(f"log line with {token} inside")
    assert nested not in redact(f"log line with {nested} inside")


def test_masker_redacts_the_private_key_of_a_keyfile(monkeypatch: pytest.MonkeyPatch) -> None:
    private_key = f"-----BEGIN PRIVATE KEY-----{uuid.uuid4().hex}-----END PRIVATE KEY-----"
    keyfile = {**KEYFILE, "private_key": private_key}
    options_for(monkeypatch, "google_cloud_platform", extra={"keyfile_dict": json.dumps(keyfile)})
    assert private_key not in redact(f"log line with {private_key} inside")


def test_errors_from_the_core_do_not_leak_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    set_conn(monkeypatch, "deltaberg_test", "aws", login=ACCESS_KEY, password=SECRET,
             extra={"aws_session_token": SESSION_TOKEN})
    hook = DeltaStorageHook("deltaberg_test")
    try:
        table = hook.open_table("s3://bucket/table")
    except StorageError as exc:  # s3fs not installed
        assert_no_secret(str(exc))
    else:  # pragma: no cover - s3fs installed
        assert_no_secret(repr(table))
        assert_no_secret(repr(table.storage))


# -- open_table -----------------------------------------------------------------------------------


@pytest.fixture
def delta_location(tmp_path: Path) -> str:
    from deltalake import write_deltalake

    location = str(tmp_path / "events")
    write_deltalake(location, pa.table({"id": [1, 2], "name": ["a", "b"]}))
    write_deltalake(location, pa.table({"id": [3], "name": ["c"]}), mode="append")
    return location


def test_open_table_with_generic_conn(monkeypatch: pytest.MonkeyPatch, delta_location: str) -> None:
    set_conn(monkeypatch, "deltaberg_local", "deltaberg", extra={"auto_mkdir": False})
    table = DeltaStorageHook("deltaberg_local").open_table(delta_location)
    assert isinstance(table, DeltaTable)
    assert table.location == delta_location
    assert table.latest_version() == 1
    assert table.snapshot().version == 1
    assert table.snapshot(0).version == 0


def test_open_table_without_conn(delta_location: str) -> None:
    table = DeltaStorageHook(None).open_table(Path(delta_location).as_uri())
    assert table.latest_version() == 1


def test_fields_of_the_connection_form_left_empty_are_no_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """The form's fields (provider info conn-fields) land in the extra, filled or not, prefixed or not."""
    options = options_for(monkeypatch, "deltaberg", extra={
        "key": ACCESS_KEY, "extra__deltaberg__secret": SECRET, "endpoint_url": "", "anon": False,
    })
    assert dict(options) == {"key": ACCESS_KEY, "secret": SECRET, "anon": False}
    assert dict(options_for(monkeypatch, "deltaberg", extra={"key": None, "secret": "", "region": ""})) == {
        "region": ""}  # only the form's own fields are dropped when empty
