"""Names from a table (column names, locations, messages quoting them) in every human-readable output are escaped
(issue 26 §5): a column name with a newline, ANSI/OSC escapes, backticks, markdown or HTML printed raw forged
``- [error]`` lines, cleared the screen and showed live markdown images. JSON output stays exact."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt
from support.compat_tables import add_files, create_compliant_table
from support.delta_log import write_commit

from airflow_deltaberg.cli import main
from airflow_deltaberg.core import display
from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.errors import ComplianceViolationError
from airflow_deltaberg.notifications import ComplianceEmailNotifier, ComplianceWebhookNotifier

EVIL = ("evil\n- [error] forged.rule: all good\r\x1b[2J\x1b]0;pwned\x07\x9b31m\u202e ![img](http://evil.test/x.png) "
        "<img src=x onerror=alert(1)> `tick` *bold* |cell| &amp;")
RAW = ("\n", "\r", "\x1b", "\x07", "\x9b", "\u202e")


def _hostile_table(root: Path) -> Path:
    """A column-mapped table whose column names are EVIL: an array without nested ids (the message names it) and a
    column without a column mapping id (its location names it)."""
    root.mkdir()
    fields = [
        {"name": EVIL, "type": {"type": "array", "elementType": "long", "containsNull": True}, "nullable": True,
         "metadata": {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-1"}},
        {"name": EVIL + "2", "type": "long", "nullable": True,
         "metadata": {"delta.columnMapping.physicalName": "col-3"}},
    ]
    write_commit(root, [
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["columnMapping"],
                      "writerFeatures": ["columnMapping"]}},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps({"type": "struct", "fields": fields}), "partitionColumns": [],
                      "configuration": {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "3"},
                      "createdTime": 1_700_000_000_000}},
    ], read_version=None, operation="CREATE TABLE")
    return root


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    return _hostile_table(tmp_path / "t")


def _clean_text(out: str) -> None:
    for char in RAW:
        assert char not in out.replace("\n", "") if char == "\n" else char not in out, repr(char)
    assert not any(line.startswith("- [error] forged") for line in out.splitlines())


def test_display_helpers() -> None:
    assert display.text("a\nb\x1b[2J\x9b\u202e\t") == "a\\nb\\x1b[2J\\x9b\\u202e\\t"
    assert display.markdown("![i](u) <b> `c` *e* a|b") == "\\!\\[i\\](u) \\<b\\> \\`c\\` \\*e\\* a\\|b"
    assert display.code("a``b|c") == "```a``b\\|c```"
    assert display.html("<b>&\n") == "&lt;b&gt;&amp;\\n"


def test_validate_text_and_markdown(hostile: Path) -> None:
    report = validate(str(hostile))
    assert any(EVIL in v.message for v in report.violations)
    assert any(v.location.path == EVIL + "2" for v in report.violations)
    text = report.to_text()
    _clean_text(text)
    assert len(text.splitlines()) == 1 + 2 * len(report.violations)
    assert display.text(EVIL) in text
    markdown = report.to_markdown()
    _clean_text(markdown)
    assert len(markdown.splitlines()) == 4 + len(report.violations)
    _renders_inert(markdown, len(report.violations))
    # JSON stays exact.
    document = json.loads(report.to_json())
    assert any(v["location"]["path"] == EVIL + "2" for v in document["violations"])


def _renders_inert(markdown: str, rows: int) -> None:
    """Rendered as GFM: no image, link, HTML or emphasis from a name; one table row a violation, five cells each."""
    rendered = MarkdownIt("commonmark").enable("table").render(markdown)
    for tag in ("<img", "<a ", "<em>", "<strong>"):
        assert tag not in rendered, tag
    assert rendered.count("<tr>") == rows + 1
    assert rendered.count("<td>") == 5 * rows
    assert "&lt;img src=x onerror=alert(1)&gt;" in rendered and "![img](http://evil.test/x.png)" in rendered


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_validate_cli(hostile: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(hostile), "--format", fmt]) == 1
    _clean_text(capsys.readouterr().out.rstrip("\n"))


def test_inspect_cli(hostile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(hostile)]) == 0
    out = capsys.readouterr().out
    _clean_text(out.rstrip("\n"))
    assert f"  {display.text(EVIL)}: array<long>  [id=1, physical=col-1]" in out.splitlines()
    assert main(["inspect", str(hostile), "--format", "json"]) == 0
    names = [f["name"] for f in json.loads(capsys.readouterr().out)["schema"]["fields"]]
    assert names[0] == EVIL  # exact in JSON


def test_enable_plan_text(hostile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`deltaberg enable --dry-run` lists the plan's changes, which name the columns: escaped."""
    assert main(["enable", str(hostile), "--dry-run"]) == 0
    out = capsys.readouterr().out
    _clean_text(out.rstrip("\n"))
    assert f"  - physical names become col-<id> for {display.text(EVIL + '2')}" in out.splitlines()


def test_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The one stderr line of a failed command names the table escaped; the JSON error document stays exact."""
    table = tmp_path / "t\x1b[2J\x1b]0;pwned\x07"
    table.mkdir()
    assert main(["convert", str(table)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and display.text(str(table)) in err
    _clean_text(err.rstrip("\n"))
    assert main(["inspect", str(table), "--format", "json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["table"] == str(table)


def _context(report: Any) -> dict[str, Any]:
    return {"exception": ComplianceViolationError(report), "dag": None}


@pytest.mark.parametrize("body_format", ["markdown", "text"])
def test_email_text_and_html_parts(hostile: Path, body_format: str, smtp_server: Any) -> None:
    report = validate(str(hostile))
    ComplianceEmailNotifier(to="owner@deltaberg.test", smtp_conn_id="smtp_test", from_email="v@deltaberg.test",
                            subject="{{ compliance_summary }}",
                            body_format=body_format).notify(_context(report))
    (message,) = smtp_server.messages
    texts = {p.get_content_type(): p.get_payload(decode=True).decode().replace("\r\n", "\n")
             for p in message.walk() if not p.is_multipart() and not p.get_filename()}
    _clean_text(texts["text/plain"].rstrip("\n"))
    if body_format == "markdown":
        _renders_inert(texts["text/plain"], len(report.violations))
    assert len(texts["text/plain"].rstrip("\n").splitlines()) == 2 + (
        4 + len(report.violations) if body_format == "markdown" else 1 + 2 * len(report.violations))
    html_part = texts["text/html"]
    _clean_text(html_part.replace("\n", ""))
    assert "<img" not in html_part and "&lt;img" in html_part
    assert not any(c in message["Subject"] for c in RAW)
    attached = next(p for p in message.walk() if p.get_filename())
    assert json.loads(attached.get_payload(decode=True)) == report.to_dict()  # exact


def test_webhook_summary(hostile: Path, webhook_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    table = hostile.rename(hostile.parent / "t\n- [error] x\x1b[2J")
    report = validate(str(table))
    conn = {"conn_type": "http", "host": webhook_server.host, "port": webhook_server.port, "schema": "http"}
    monkeypatch.setenv("AIRFLOW_CONN_HOOK_TEST", json.dumps(conn))
    ComplianceWebhookNotifier(http_conn_id="hook_test").notify(_context(report))
    (request,) = webhook_server.requests
    body = request.json()
    assert not any(c in body["summary"] for c in RAW)
    assert body["table"] == str(table)  # the JSON fields stay exact
    assert body["report"] == report.to_dict()


def test_convert_summary_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The conversion summary's warnings (here: a collation named by the table) are shown escaped."""
    t = create_compliant_table(tmp_path / "t", [("id", "long"), ("name", "string")],
                               protocol_overrides={"writerFeatures": ["columnMapping", "icebergCompatV2",
                                                                      "icebergWriterCompatV1", "collations",
                                                                      "domainMetadata"]})
    schema = t.schema()
    schema["fields"][1]["metadata"]["__COLLATIONS"] = {"name": EVIL}
    t.set_schema(schema)
    add_files(t, {"id": [1, 2], "name": ["a", "B"]})
    assert main(["convert", t.location]) == 0
    out = capsys.readouterr().out
    _clean_text(out.rstrip("\n"))
    assert any(line.startswith("warning: collated") and display.text(EVIL) in line for line in out.splitlines())
