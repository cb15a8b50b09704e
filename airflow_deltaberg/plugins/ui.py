"""The plugin: a FastAPI app under ``/deltaberg`` (the "Delta -> Iceberg" page, a page per table, its stylesheet)
and the nav entry that shows the page inside Airflow's UI (an external view, in an iframe). Every request needs a
user who may read assets (Airflow's own token cookie or bearer token, checked by Airflow's auth manager).

Thin: the facts come from ``lake_data``, the HTML from ``core.lake_page``."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Any

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

URL_PREFIX = "/deltaberg"
URL_ROUTE = "delta-iceberg"
STYLESHEET = Path(__file__).parent / "static" / "deltaberg.css"
_bearer = HTTPBearer(auto_error=False)


async def may_read_assets(request: Request,
                          credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    """401 without a valid token, 403 for a user who may not read assets (Airflow's auth manager decides)."""
    from airflow.api_fastapi.core_api import security

    user = await security.get_user(request, None, credentials)
    security.requires_access_asset("GET")(request, user)


def _session() -> Any:
    from airflow.utils.session import create_session

    return create_session()


def create_app() -> FastAPI:
    app = FastAPI(title="Delta -> Iceberg", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(may_read_assets)])

    @app.get("/", response_class=HTMLResponse)
    def overview() -> str:
        from airflow_deltaberg.core.lake_page import overview_html
        from airflow_deltaberg.plugins.lake_data import gather

        with _session() as session:
            tables = gather(session)
        return overview_html(tables, dt.datetime.now(dt.timezone.utc))

    @app.get("/table", response_class=HTMLResponse)
    def table(key: str) -> str:
        from airflow_deltaberg.core.lake_page import table_page_html
        from airflow_deltaberg.plugins.lake_data import find, gather

        with _session() as session:
            found = find(gather(session), key)
        if found is None:
            raise HTTPException(status_code=404, detail="no such table on this page")
        return table_page_html(found)

    @app.get("/static/deltaberg.css")
    def stylesheet() -> FileResponse:
        return FileResponse(STYLESHEET, media_type="text/css")

    return app


class DeltabergPlugin(AirflowPlugin):
    name = "deltaberg"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Delta -> Iceberg"}]
    external_views = [{
        "name": "Delta -> Iceberg",
        # relative: the UI resolves it against its base URL (a deployment under a sub-path keeps working)
        "href": URL_PREFIX.lstrip("/") + "/",
        "destination": "nav",
        "category": "browse",
        "url_route": URL_ROUTE,
    }]
