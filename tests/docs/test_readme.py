"""README.md: short enough to read top-down, and what it says of the command line is what the parser does."""

from __future__ import annotations

import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _readme() -> str:
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        return f.read()


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def test_the_readme_reads_in_ten_minutes_and_names_one_command_each_to_set_up_and_test():
    text = _readme()
    assert len(text.splitlines()) <= 220
    develop = _section(text, "Develop and test")
    assert "make setup" in develop and "make test" in develop and "minutes" in develop


def test_the_command_table_is_the_parsers():
    from jupyter_compile_cache.frontends import cli

    parser = cli._parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    hub = next(a for a in commands["hub"]._actions if a.dest == "hub_command").choices
    table = _section(_readme(), "The command line")
    named = set(re.findall(r"^\| `([a-z-]+)", table, re.M)) | set(re.findall(r" / `([a-z-]+)", table))
    named_hub = set(re.findall(r"`hub ([a-z]+)", table))
    assert {name for name in commands if name != "show"} <= named | {"hub"}  # every command is in the table
    assert named <= set(commands) | {"hub"}  # and the table names no command the parser lacks
    assert named_hub == set(hub)
    for command, usage in re.findall(r"^\| `([a-z-]+) ([^`|]*)`", table, re.M):  # each option shown exists
        if command == "hub":
            continue
        options = {o for a in commands[command]._actions for o in a.option_strings}
        assert set(re.findall(r"--[a-z-]+", usage)) <= options, (command, usage)


def test_the_exit_status_table_is_the_clis():
    from jupyter_compile_cache.frontends import cli

    table = _section(_readme(), "The command line")
    rows = dict(re.findall(r"^\| (\d) \| (\w[^|]*)\|", table, re.M))
    assert {int(code) for code in rows} == {cli.OK, cli.NOT_FOUND, cli.USAGE, cli.REFUSED, cli.HUB_FAILED, cli.ERROR}
    assert rows[str(cli.NOT_FOUND)].startswith("not found") and rows[str(cli.REFUSED)].startswith("refused")
    assert rows[str(cli.USAGE)].startswith("usage") and rows[str(cli.HUB_FAILED)].startswith("the hub failed")
    for code, meaning in rows.items():  # the CLI's own docstring says the same
        assert re.search(rf"^    {code}  {re.escape(meaning.split(':')[0].strip())}", cli.__doc__, re.M), (
            code,
            meaning,
        )
