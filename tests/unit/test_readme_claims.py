"""What README.md and docs/*.md say about the `turnstile` command and about statuses is true.

* Every `turnstile <command> [<subcommand>] ... --option` they show (in code blocks, in
  inline code, and `turnstile <command> --option` in prose) names a command, a subcommand
  and options that the CLI's own `--help` lists. The help is read from the installed
  command in a subprocess, whatever library parses its arguments. A command shown with
  the error it gets (a `$ turnstile ...` line followed by a `turnstile: ...` line) is a
  mistake on purpose, and not checked.
* Every list of statuses (three or more upper-case words, two of them statuses, joined by
  commas, "or", "and" or "/") names statuses of ``Status.ALL`` only, and one that names
  ``PENDING`` (a list of what a signup can be, not of the statuses a rule applies to) names
  all seven.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnstile.base.contract import Status

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TURNSTILE = Path(sys.executable).parent / "turnstile"

# -- the CLI's own word ----------------------------------------------------------------


@functools.cache
def help_text(*words: str) -> str:
    """``turnstile WORDS --help``, as a user reads it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTILE_")}
    done = subprocess.run(
        [str(TURNSTILE), *words, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "COLUMNS": "100"},
    )
    assert done.returncode == 0, f"turnstile {' '.join(words)} --help: {done.stderr}"
    return done.stdout


_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def options_of(text: str) -> set[str]:
    """The long options a help text lists: in its usage lines and its option lines (argparse
    and click alike), not in the prose of descriptions."""
    found: set[str] = set()
    in_usage = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.lower().startswith("usage:"):
            in_usage = True
        elif not stripped:
            in_usage = False
        if in_usage or stripped.startswith("-"):
            found |= set(_OPTION.findall(line))
    return found


def commands_of(text: str) -> set[str]:
    """The subcommands a help text lists: argparse's ``{a,b,c} ...`` in its usage, or the
    entries of click's ``Commands:`` section."""
    braces = re.search(r"\{([a-z][a-z,-]*)\} \.\.\.", text)
    if braces:
        return set(braces.group(1).split(","))
    section = re.search(r"^Commands:\n((?:[ \t]+\S.*\n?)*)", text, re.M)
    if not section:
        return set()
    return {m.group(1) for m in re.finditer(r"^  ([a-z][a-z-]*)(?:\s|$)", section.group(1), re.M)}


def global_options() -> tuple[set[str], set[str]]:
    """The options `turnstile` takes before (or, with click, anywhere around) a command, and
    those of them that take a value (``--stack NAME``)."""
    text = help_text()
    taking_value = set()
    for line in text.splitlines():
        column = re.split(r"\s{2,}", line.strip())[0]
        flags = _OPTION.findall(column)
        if line.strip().startswith("-") and flags and re.search(rf"{flags[-1]}[ =]\S", column):
            taking_value.add(flags[-1])
    return options_of(text) | {"--help"}, taking_value


# -- what the documents say -------------------------------------------------------------


def blocks(text: str) -> Iterator[tuple[str, str]]:
    """("code", a fenced block's text) and ("prose", a paragraph's text, its lines joined)."""
    prose: list[str] = []
    code: list[str] | None = None
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            if code is None:
                yield "prose", " ".join(prose)
                prose, code = [], []
            else:
                yield "code", "\n".join(code)
                code = None
        elif code is not None:
            code.append(line)
        elif line.strip():
            prose.append(line.strip())
        else:
            yield "prose", " ".join(prose)
            prose = []
    if code is not None:
        yield "code", "\n".join(code)
    yield "prose", " ".join(prose)


_SPAN = re.compile(r"(`+)(.+?)\1")
#: Where one shell command ends and another (or a redirection) begins.
_SHELL_END = re.compile(r"\s(?:&&|\|\||\||;|>|2>|<)\s|;\s*$|\$\(|\)")
#: `turnstile` as a command: at the start, after a path, a separator or a `$(`.
_INVOCATION = re.compile(r"(?:^|(?<=[\s/;&|(]))turnstile\s+(.*)")


def _alternatives(text: str) -> str:
    """``[--reset | --in-memory]`` as plain words: brackets and the pipes between
    alternatives are the synopsis's, not the shell's."""
    text = text.replace("\\|", " ")
    return re.sub(r"\[([^\]]*)\]", lambda m: " " + m.group(1).replace("|", " ") + " ", text)


def _tokens(segment: str) -> list[str]:
    try:
        return shlex.split(segment)
    except ValueError:
        return segment.split()


def invocations(text: str) -> Iterator[tuple[str, list[str]]]:
    """Each `turnstile ...` a document shows, as (where, its words after `turnstile`).

    In code (fenced blocks, inline spans) every invocation counts; in prose, only
    `turnstile <command>` followed by options in the same clause (elsewhere "turnstile" is
    the project's name)."""
    commands = commands_of(help_text())
    for kind, content in blocks(text):
        if kind == "code":
            lines = re.sub(r"\\\n", " ", content).splitlines()
            # a mistake shown on purpose: the command, then the error it gets
            lines = [
                line
                for line, after in zip(lines, [*lines[1:], ""], strict=True)
                if not after.startswith("turnstile: ")
            ]
            pieces = [_alternatives(line) for line in lines]
            pieces = [re.sub(r"(^|\s)#.*$", "", piece) for piece in pieces]  # comments
            where = "code block"
        else:
            pieces = [_alternatives(span) for _, span in _SPAN.findall(content)]
            where = "inline code"
            words = _SPAN.sub(" ", content)
            pattern = rf"\bturnstile\s+((?:{'|'.join(sorted(commands))})\b[^.,;:()]*)"
            for match in re.finditer(pattern, words):
                if _OPTION.search(match.group(1)):
                    yield f"prose: {match.group(0)[:80]}", _tokens(match.group(1))
        for piece in pieces:
            for match in _INVOCATION.finditer(piece):
                segment = _SHELL_END.split(match.group(1))[0]
                yield f"{where}: turnstile {segment.strip()[:80]}", _tokens(segment)


def check_invocation(words: list[str]) -> list[str]:
    """What is wrong with ``turnstile WORDS``: an unknown command, subcommand or option."""
    known_global, global_values = global_options()
    commands = commands_of(help_text())
    problems: list[str] = []
    rest = list(words)
    while rest and rest[0].startswith("-"):
        flag = rest.pop(0).split("=")[0]
        if flag.startswith("--") and flag not in known_global:
            problems.append(f"turnstile has no option {flag}")
        if flag in global_values and rest:
            rest.pop(0)
    if not rest:
        return problems
    command = rest.pop(0)
    if not re.fullmatch(r"[a-z][a-z-]*", command):
        return problems  # a placeholder (COMMAND), output (`turnstile local:`), a figure
    if command not in commands:
        return [*problems, f"turnstile has no command {command!r}"]
    path = [command]
    subcommands = commands_of(help_text(command))
    if subcommands and rest and re.fullmatch(r"[a-z][a-z-]*", rest[0]):
        sub = rest.pop(0)
        if sub not in subcommands:
            return [*problems, f"turnstile {command} has no subcommand {sub!r}"]
        path.append(sub)
    known = options_of(help_text(*path)) | known_global
    for word in rest:
        for flag in _OPTION.findall(word.split("=")[0]) if word.startswith("--") else []:
            if flag not in known:
                problems.append(f"turnstile {' '.join(path)} has no option {flag}")
    return problems


_WORD = r"`?\b[A-Z][A-Z_]{2,}\b`?"
_SEPARATOR = r"(?:\s*,\s*(?:or\s+|and\s+)?|\s+or\s+|\s+and\s+|\s*/\s*)"
_LIST = re.compile(rf"{_WORD}(?:{_SEPARATOR}{_WORD})+")


def status_problems(text: str) -> list[str]:
    """Lists of statuses that name something else, or name PENDING and not all seven."""
    problems = []
    flat = re.sub(r"\s+", " ", text)
    for match in _LIST.finditer(flat):
        names = [w.strip("`") for w in re.findall(_WORD, match.group(0))]
        statuses = [n for n in names if n in Status.ALL]
        if len(names) < 3 or len(statuses) < 2:
            continue  # not a list of statuses: OPEN/CLOSED, two statuses a rule names
        others = [n for n in names if n not in Status.ALL]
        if others:
            problems.append(f"{match.group(0)!r}: not statuses: {others}")
        elif Status.PENDING in names and set(names) != set(Status.ALL):
            missing = [s for s in Status.ALL if s not in names]
            problems.append(f"{match.group(0)!r}: the statuses are seven; missing {missing}")
    return problems


# -- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_turnstile_command_and_option_shown_exists(document: Path) -> None:
    wrong = []
    for where, words in invocations(document.read_text()):
        wrong += [f"{where}: {problem}" for problem in check_invocation(words)]
    assert not wrong, f"{document.relative_to(ROOT)}:\n" + "\n".join(wrong)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_list_of_statuses_is_right(document: Path) -> None:
    wrong = status_problems(document.read_text())
    assert not wrong, f"{document.relative_to(ROOT)}:\n" + "\n".join(wrong)


def test_the_documents_are_read():
    """The checks see what they must: the README's session, its statuses."""
    readme = (ROOT / "README.md").read_text()
    shown = [words for _, words in invocations(readme)]
    assert ["event", "create", "concert", "--capacity", "2"] in shown
    assert any(w[:2] == ["status", "gig"] and "--until" in w for w in shown)
    assert all(status in readme for status in Status.ALL)


def test_the_checks_can_fail():
    """A bogus option, command or subcommand, a status that is none, a list that leaves
    statuses out: each is caught, in a code block, inline code and prose alike."""
    text = "\n".join(
        [
            "```sh",
            "turnstile status concert alice --wait 10 --bogus",
            ".venv/bin/turnstile --stack S evnt create x",
            "```",
            "Run `turnstile event craete x --capacity 1`, or turnstile submit --nope.",
        ]
    )
    problems = [p for _, words in invocations(text) for p in check_invocation(words)]
    assert sorted(problems) == [
        "turnstile event has no subcommand 'craete'",
        "turnstile has no command 'evnt'",
        "turnstile status has no option --bogus",
        "turnstile submit has no option --nope",
    ]
    shown_with_its_error = "```\n$ turnstile evnt list\nturnstile: no such command 'evnt'\n```"
    assert list(invocations(shown_with_its_error)) == []
    assert check_invocation(["--stack", "S", "event", "create", "x", "--capacity", "1"]) == []
    assert status_problems("its status: `PENDING`, `ACCEPTED` or `REJECTED`.")
    assert status_problems("HELD, ACCEPTED or CONFIRMED")
    assert not status_problems("a cancel of a `HELD`, `ACCEPTED` or `WAITLISTED` signup")
    assert not status_problems(", ".join(Status.ALL))


def test_the_indexes_list_every_page() -> None:
    """docs/README.md links every page of docs/, and the README's "Where to go next" every
    page but that index itself, so a new page cannot go unlisted."""
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    index = set(re.findall(r"\]\(([\w.-]+\.md)\)", (ROOT / "docs" / "README.md").read_text()))
    readme = (ROOT / "README.md").read_text()
    next_steps = readme[readme.index("## Where to go next") :]
    listed = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", next_steps))
    assert pages - index == set(), "docs/README.md does not list them"
    assert pages - listed == set(), "the README's Where to go next does not list them"


def test_the_readme_stays_one_short_page():
    """The README is the point, the two commands, a first session and where to go next;
    everything else lives in docs/ (docs/README.md lists it)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 200, f"README.md has {len(lines)} lines: move the detail into docs/"
