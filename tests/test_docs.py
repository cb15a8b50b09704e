"""The entry points stay short and their links resolve (issue 27 §1): README.md under 10,000 characters, opening
with the two commands; every relative link (and anchor) in README.md, docs/*.md, benchmarks/README.md and
tests/README.md names an existing file (and heading, as GitHub slugs it)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COMMANDS = (
    "./scripts/demo.sh   # set up .venv; run the event-driven example DAG on a Delta table it writes, append, "
    "run again\n"
    "./scripts/test.sh   # set up .venv and the Spark jars; lint; the suite; tests/install again in .venv-floor "
    "(Airflow 3.1.0, no extras)\n"
)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def documents() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md",
            ROOT / "tests" / "README.md"]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, code and bold marks and punctuation dropped (not - and _),
    spaces as -."""
    text = heading.strip().replace("`", "").replace("*", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    result = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else f"{base}-{n}")
    return result


def links(path: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", path.read_text(encoding="utf-8")))


def test_readme_is_short() -> None:
    assert len(README.read_text(encoding="utf-8")) < 10_000


def test_readme_opens_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert text.startswith("# airflow-deltaberg\n\n```bash\n" + COMMANDS + "```\n"), "README must open with the " \
        "demo and test commands"


def broken_links(doc: Path) -> list[str]:
    """The relative links of ``doc`` whose file, or heading anchor in a Markdown file, does not exist."""
    broken = []
    for target in links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...: not checked (no network)
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (doc.parent / file_part).resolve() if file_part else doc
        if not resolved.exists() or (anchor and resolved.suffix == ".md" and anchor not in anchors(resolved)):
            broken.append(target)
    return broken


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = broken_links(doc)
    assert not broken, f"{doc.relative_to(ROOT)}: links that resolve to nothing: {broken}"


def test_the_link_checker_catches_a_broken_link_and_anchor(tmp_path: Path) -> None:
    doc = tmp_path / "a.md"
    doc.write_text("# Title\n\n## Two words `x`\n\n[ok](a.md#two-words-x) [bad](b.md) [no](#none) [web](https://x)\n")
    assert broken_links(doc) == ["b.md", "#none"]


def readme_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)


def test_readme_cli_quickstart_parses() -> None:
    from airflow_deltaberg.cli import build_parser

    commands = [line.split(" #")[0] for block in readme_blocks("bash") for line in block.splitlines()
                if line.startswith("deltaberg ")]
    assert len(commands) >= 4
    for command in commands:
        build_parser().parse_args(shlex.split(command)[1:])  # a wrong option or value exits 2


def test_readme_dag_quickstart_builds() -> None:
    (block,) = readme_blocks("python")
    names: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), names)  # the README's own example
    validate, convert = names["validate"], names["convert"]
    assert convert.upstream_task_ids == {"validate"}  # type: ignore[attr-defined]
    assert validate.dag.dag_id == "sales_to_iceberg"  # type: ignore[attr-defined]


def test_validation_doc_names_every_data_rule_and_the_count() -> None:
    from airflow_deltaberg.core.compat import RULES

    text = (ROOT / "docs" / "validation.md").read_text(encoding="utf-8")
    assert f"({len(RULES)} of them)" in " ".join(text.split()), "docs/validation.md's rule count"
    missing = [r.id for r in RULES if r.id.startswith("data.") and f"`{r.id}`" not in text]
    assert not missing, f"docs/validation.md does not name the data rules {missing}"
