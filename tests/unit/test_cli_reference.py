"""docs/cli.md and the command line cannot drift apart: every command of the click tree
has its section, every argument and option its row with the default its help shows, and
nothing documented is gone from the command line; the exit codes and output formats too."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from turnstile_tools import cli, output

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
COMMAND_HEADING = re.compile(r"^#{2,4} `(turnstile[^`]*)`\s*$")
#: How click shows an argument: EVENT_ID, [EVENT_ID] (optional), [ARGUMENTS]... (any number).
ARGUMENT = re.compile(r"^\[?[A-Z][A-Z_]*\]?(\.\.\.)?$")
OPTION = re.compile(r"(?:^|[\s,])(--?[a-z][a-z-]*)")
#: Every command has these; docs/cli.md says so once, in the global options.
HELP_OPTIONS = {"-h", "--help"}


def rows(text: str) -> Iterator[list[str]]:
    """The cells of each table row that starts with a code span (| `...` | ...)."""
    for line in text.splitlines():
        if line.startswith("| `"):
            yield [cell.strip() for cell in line.strip().strip("|").split("|")]


def sections() -> dict[str, str]:
    """Each command's section of docs/cli.md (up to the next heading), by its path."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in DOC.read_text().splitlines():
        if line.startswith("#"):
            match = COMMAND_HEADING.match(line)
            current = None
            if match:
                assert match[1] not in found, f"docs/cli.md: {match[1]} twice"
                current = found[match[1]] = []
        elif current is not None:
            current.append(line)
    return {path: "\n".join(lines) for path, lines in found.items()}


def tokens(spec: str) -> list[str]:
    """What a row's first cell names: an argument's metavar, or an option's flags."""
    spec = spec.replace("`", "")
    if ARGUMENT.match(spec):
        return [spec]
    return OPTION.findall(spec)


def documented(section: str) -> dict[str, str]:
    """An argument or option of a section -> the default its row gives."""
    found: dict[str, str] = {}
    for cells in rows(section):
        named = tokens(cells[0])
        assert named, f"docs/cli.md: a row that names nothing: {cells}"
        for token in named:
            if token not in HELP_OPTIONS:
                found[token] = cells[1].strip("`")
    return found


def commands(
    command: click.Command = cli.turnstile_cli, ctx: click.Context | None = None
) -> Iterator[tuple[str, click.Command, click.Context]]:
    """Every command of the click tree with its path and context (as main makes them)."""
    if ctx is None:
        ctx = command.make_context("turnstile", [], resilient_parsing=True)
    yield ctx.command_path, command, ctx
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from commands(sub, sub.make_context(name, [], parent=ctx, resilient_parsing=True))


def default_of(param: click.Parameter, ctx: click.Context) -> str:
    """The default as the command's help shows it ("required" where there is none)."""
    if param.required:
        return "required"
    if isinstance(param, click.Option):
        return str(param.get_help_extra(ctx).get("default", ""))
    shown = re.search(r"\[default: ([^\]]*)\]", getattr(param, "help", None) or "")
    return shown[1] if shown else "none"


def in_the_tree(command: click.Command, ctx: click.Context) -> dict[str, str]:
    """An argument or option of the command -> its default, as the help shows it."""
    found: dict[str, str] = {}
    for param in command.params:
        if isinstance(param, click.Argument):
            names = [param.make_metavar(ctx)]
        else:
            names = [*param.opts, *param.secondary_opts]
        for name in names:
            found[name] = default_of(param, ctx)
    return found


def test_every_command_has_a_section_and_every_section_a_command():
    assert sorted(sections()) == sorted(path for path, _, _ in commands())


@pytest.mark.parametrize("path", [path for path, _, _ in commands()])
def test_every_argument_and_option_is_documented_with_its_default(path: str):
    command, ctx = next((c, x) for p, c, x in commands() if p == path)
    assert documented(sections().get(path, "")) == in_the_tree(command, ctx)


def test_the_walk_and_the_reading_find_something():
    # (a reading that found no rows, or a walk that found no options, would pass vacuously)
    create = documented(sections()["turnstile event create"])
    assert create["EVENT_ID"] == "required" and create["--capacity"] == "required"
    assert create["--waitlist"] == "0: no waitlist" and create["-o"] == "json"
    assert documented(sections()["turnstile audit"])["[EVENT_ID]"] == "every event"
    assert len([p for p, _, _ in commands()]) >= 17


def test_every_exit_code_and_output_format_is_documented():
    text = DOC.read_text()
    exit_codes = re.search(r"^## Exit codes\n(.*?)^## ", text, re.S | re.M)
    assert exit_codes, "docs/cli.md lost its Exit codes section"
    listed = re.findall(r"^\| (\d+) \| (.*) \|$", exit_codes[1], re.M)
    assert {int(code) for code, _ in listed} == set(cli.EXIT_CODES)
    for code, meaning in listed:
        # the same words as `turnstile --help`, code spans aside
        assert meaning.replace("`", "") == cli.EXIT_CODES[int(code)], code
    formats = re.search(r"^## Output\n(.*?)^## ", text, re.S | re.M)
    assert formats, "docs/cli.md lost its Output section"
    assert [cells[0].strip("`") for cells in rows(formats[1])] == list(output.FORMATS)
