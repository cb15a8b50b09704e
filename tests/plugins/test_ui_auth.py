"""The plugin page behind Airflow's auth, in process: Airflow's own api-server app (the plugin mounted under
/deltaberg by its plugins manager) with the SimpleAuthManager and anonymous admin access off, as a deployment
with users runs it. The deployment tests run with every user an admin, so only here does a request without a
token, with a forged one, or from a user without the asset permission reach the page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PAGES = ("/deltaberg/", "/deltaberg/table?key=file%3A%2F%2F%2Fnowhere", "/deltaberg/static/deltaberg.css")


@pytest.fixture(scope="module")
def api_app(airflow_db: Path) -> Iterator[Any]:
    """Airflow's api-server app (core API and plugins) with the SimpleAuthManager: one user, a viewer."""
    from airflow.api_fastapi import app as api_app_module

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW__CORE__AUTH_MANAGER",
                     "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager")
        patch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
        patch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "viewer:viewer")
        patch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "deltaberg-plugin-auth-test-" + "0" * 40)
        api_app_module.purge_cached_app()
        yield api_app_module.create_app(apps="core")
        api_app_module.purge_cached_app()


def token(role: str | None) -> str:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return get_auth_manager().generate_jwt(SimpleAuthManagerUser(username=role or "nobody", role=role))


@pytest.fixture
def client(api_app: Any) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    with TestClient(api_app) as test_client:
        yield test_client


def get(client: Any, page: str, how: str, credential: str) -> Any:
    """``page`` with ``credential`` as a bearer token (``how="bearer"``) or as Airflow's token cookie."""
    client.cookies.clear()
    if how == "bearer":
        return client.get(page, headers={"Authorization": f"Bearer {credential}"})
    client.cookies.set("_token", credential)
    return client.get(page)


@pytest.mark.parametrize("page", PAGES)
def test_a_request_without_a_token_is_refused(client: Any, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 401
    assert "Delta -&gt; Iceberg" not in response.text and "<table" not in response.text


@pytest.mark.parametrize("page", PAGES)
def test_a_forged_token_is_refused(client: Any, page: str) -> None:
    forged = token("viewer")[:-4] + "AAAA"
    for how in ("bearer", "cookie"):
        response = get(client, page, how, forged)
        assert response.status_code == 403, how
        assert "<table" not in response.text


@pytest.mark.parametrize("page", PAGES)
def test_a_user_without_the_asset_permission_is_refused(client: Any, page: str) -> None:
    response = client.get(page, headers={"Authorization": f"Bearer {token(None)}"})
    assert response.status_code == 403
    assert "<table" not in response.text


def test_a_viewer_reads_the_page_with_a_bearer_token_or_the_cookie(client: Any) -> None:
    for how in ("bearer", "cookie"):
        page = get(client, "/deltaberg/", how, token("viewer"))
        assert page.status_code == 200, page.text[:500]
        assert "<h1>Delta -&gt; Iceberg</h1>" in page.text
        sheet = get(client, "/deltaberg/static/deltaberg.css", how, token("viewer"))
        assert sheet.status_code == 200 and sheet.headers["content-type"].startswith("text/css")
        missing = get(client, "/deltaberg/table?key=file%3A%2F%2F%2Fnowhere", how, token("viewer"))
        assert missing.status_code == 404  # past the auth: no such table on the page
