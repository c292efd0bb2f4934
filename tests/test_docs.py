"""Every code block of the README and docs/ stays true: Python compiles, shell parses, every
``lakehouse`` command and option it shows exists, every SQL block runs somewhere
(tests/lakehouse/serving/test_query_docs.py), and every link points at a file that exists.
The blocks marked ``<!-- run: ... -->`` / ``<!-- file: ... -->`` also run for real
(tests/test_readme.py, tests/lakehouse/platform/test_embedded.py)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from typer.main import get_command

from lakehouse.cli import app

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- (\w+): (\S+) -->\n)?```(\w*)\n(.*?)\n```", re.DOTALL)


def blocks(language: str) -> list[tuple[str, str | None, str]]:
    """(page, marker, code) of every ``language`` block."""
    found = []
    for page in PAGES:
        for kind, name, lang, code in BLOCK.findall(page.read_text()):
            if lang == language:
                found.append((page.relative_to(REPO).as_posix(), f"{kind}:{name}" if kind else None, code))
    return found


def test_the_readme_is_a_front_door() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in readme, f"the README does not link {page.name}"


@pytest.mark.parametrize(("page", "marker", "code"), blocks("python"))
def test_python_blocks_compile_and_declarations_run(page: str, marker: str | None, code: str) -> None:
    compiled = compile(code, f"{page} {marker or ''}", "exec")
    imported = set(re.findall(r"^(?:from|import) ([\w.]+)", code, re.MULTILINE))
    if imported and imported <= {"lakehouse.spec", "lakehouse.quality"}:  # a declaration: it validates itself
        exec(compiled, {})


@pytest.mark.parametrize(("page", "marker", "code"), blocks("bash"))
@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_shell_blocks_parse(page: str, marker: str | None, code: str) -> None:
    result = subprocess.run(["bash", "-n"], input=code, capture_output=True, text=True)
    assert result.returncode == 0, f"{page}: {result.stderr}"


def lakehouse_commands() -> list[tuple[str, list[str]]]:
    """Every ``lakehouse ...`` command line shown in a shell block (continuations joined)."""
    found = []
    for page, _, code in blocks("bash"):
        for line in code.replace("\\\n", " ").splitlines():
            line = re.sub(r"^\s*(\w+=\S+\s+)*", "", line.split("  #")[0]).strip()
            if line.startswith("lakehouse "):
                found.append((page, shlex.split(line, comments=True)[1:]))
    return found


@pytest.mark.parametrize(("page", "argv"), lakehouse_commands())
def test_lakehouse_commands_and_options_exist(page: str, argv: list[str]) -> None:
    group = get_command(app)
    command = group.commands.get(argv[0])  # type: ignore[attr-defined]
    assert command is not None, f"{page}: no command `lakehouse {argv[0]}`"
    rest = argv[1:]
    if hasattr(command, "commands") and rest and rest[0] in command.commands:
        command, rest = command.commands[rest[0]], rest[1:]
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    for word in rest:
        if word.startswith("-"):
            assert word.split("=")[0] in known, f"{page}: `lakehouse {' '.join(argv)}`: no option {word}"


def test_every_sql_block_is_one_the_tests_run() -> None:
    unmarked = [(page, code[:60]) for page, marker, code in blocks("sql") if not marker]
    assert not unmarked, f"SQL blocks without a <!-- sql: name --> marker (so no test runs them): {unmarked}"


def test_links_between_pages_point_at_files() -> None:
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_every_setting_is_in_the_configuration_table() -> None:
    from lakehouse.core.config import Settings

    table = (REPO / "docs" / "operate.md").read_text().split("## Configuration", 1)[1]
    missing = [
        f"LAKEHOUSE_{name.upper()}"
        for name in Settings.model_fields
        if f"`LAKEHOUSE_{name.upper()}`" not in table
    ]
    assert not missing, f"docs/operate.md's configuration table lacks {missing}"
