"""The documents and the code in step: every setting and every `berth admin` command
is documented, README's architecture has a line for every package, scheduler job and
`berth admin` command, everything the documents name exists, every relative link
resolves, and the README stays short. Reads files, the click command tree and the
scheduler's job list only: nothing starts."""

import importlib
import pkgutil
import re
from pathlib import Path

import click
import pytest

from control_plane import cli as cli_package
from control_plane.agent_link import Plain
from control_plane.infra import config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
OPERATIONS = DOCS / "operations.md"
README_MAX_LINES = 300

ADMIN_MENTION = re.compile(r"\bberth admin((?:[ \t]+[a-z][a-z0-9-]*(?:[|/][a-z][a-z0-9-]*)*)*)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CP_NAME = re.compile(r"\bCP_([A-Z0-9_]+)\b")


def documents():
    return [README, *sorted(DOCS.glob("*.md"))]


def prose(path):
    """The document without its fenced code blocks."""
    kept, fenced = [], False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            kept.append(line)
    return "\n".join(kept)


def section(path, heading):
    """The lines under `heading` up to the next heading of the same or a higher level."""
    level = heading.split(" ")[0]
    lines = path.read_text().splitlines()
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines))
                if re.match(rf"#{{1,{len(level)}}} ", lines[i])), len(lines))
    return lines[start:end]


# --- settings -------------------------------------------------------------------------

def settings():
    """What `config.load` reads from the environment: every upper-case attribute of
    `Config`, FOO as CP_FOO."""
    return {name for name in vars(config.Config) if name.isupper()}


def configuration_table():
    """The CP_* names in the first table under "## Configuration" in operations.md."""
    lines = section(OPERATIONS, "## Configuration")
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return {name for line in table for name in CP_NAME.findall(line)}


def test_every_setting_is_in_the_configuration_table():
    missing = sorted(f"CP_{name}" for name in settings() - configuration_table())
    assert not missing, f"add to the configuration table of docs/operations.md: {missing}"


def test_every_setting_in_the_configuration_table_exists():
    unknown = sorted(f"CP_{name}" for name in configuration_table() - settings())
    assert not unknown, f"not a setting of control_plane.infra.config.Config: {unknown}"


def test_every_agent_setting_is_documented():
    read = {name for path in (ROOT / "agent").glob("*.py")
            for name in re.findall(r"\b(BERTH_AGENT_[A-Z0-9_]+)\b", path.read_text())}
    assert read, "no BERTH_AGENT_* setting found in agent/"
    text = OPERATIONS.read_text()
    missing = sorted(name for name in read if name not in text)
    assert not missing, f"add to docs/operations.md: {missing}"


# --- commands -------------------------------------------------------------------------

def command_tree():
    """`berth` with every command registered: `main` imports the modules of
    control_plane.cli that add `berth admin …`, so import them all."""
    for module in pkgutil.iter_modules(cli_package.__path__):
        importlib.import_module(f"{cli_package.__name__}.{module.name}")
    return cli_package.cli


def leaf_commands():
    """Every command that runs something, as its words: `berth admin key create`."""
    found = []

    def walk(command, words):
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, (*words, name))
        else:
            found.append(" ".join(words))

    walk(command_tree(), ("berth",))
    return sorted(found)


def admin_mentions():
    """(document, words after `berth admin`) for every mention in the documents."""
    for path in documents():
        for match in ADMIN_MENTION.finditer(path.read_text()):
            yield path.relative_to(ROOT), match.group(1).split()


def resolve(words):
    """None when `berth admin <words>` names commands that exist (the words after a
    command are its arguments), else the first word that is not a command."""
    command = command_tree().commands["admin"]
    for word in words:
        if not isinstance(command, click.Group):
            return None
        alternatives = re.split(r"[|/]", word)
        unknown = [name for name in alternatives if name not in command.commands]
        if unknown:
            return unknown[0]
        command = command.commands[alternatives[0]]
    return None


def test_the_command_tree_is_found():
    commands = leaf_commands()
    assert "berth serve" in commands
    assert "berth admin key create" in commands
    assert "berth admin config set" in commands


def test_every_berth_admin_command_mentioned_exists():
    wrong = [f"{path}: berth admin {' '.join(words)} ({resolve(words)!r} is not a command)"
             for path, words in admin_mentions() if resolve(words) is not None]
    assert not wrong, "\n".join(wrong)


def test_every_command_is_in_operations_md():
    text = OPERATIONS.read_text()
    missing = [name for name in leaf_commands()
               if not re.search(re.escape(name) + r"(?![\w-])", text)]
    assert not missing, f"add to the commands of docs/operations.md: {missing}"


# --- links ----------------------------------------------------------------------------

def anchors(path):
    """The anchors a Markdown renderer makes for the headings of `path`."""
    seen, found = {}, set()
    for line in prose(path).splitlines():
        match = re.match(r"#{1,6} (.*)", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links():
    for path in documents():
        for target in LINK.findall(prose(path)):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                yield path, target


def test_the_links_are_found():
    assert any(target == "docs/operations.md" for _, target in relative_links())


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_and_heading_that_exist(path):
    broken = []
    for source, target in relative_links():
        if source != path:
            continue
        file, _, anchor = target.partition("#")
        destination = (path.parent / file).resolve() if file else path
        if not destination.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no heading for #{anchor} in {destination.name}")
    assert not broken, "\n".join(broken)


# --- the README -----------------------------------------------------------------------

def test_the_readme_stays_short():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; keep it at most {README_MAX_LINES} and move "
        "details into docs/")


# --- the architecture map -------------------------------------------------------------
# README's "## Architecture" is the one map: a list item per package, per scheduler job
# and per `berth admin` command, each opening with its name in backquotes, in a
# paragraph that starts with the list's bold title.

PACKAGE_ROOTS = ("control_plane", "agent", "protocol", "berthctl")
ITEM = re.compile(r"- `([^`]+)`")


def architecture_items(title):
    """The names opening the list items of the paragraph starting with `title` in
    README's architecture section (none when there is no such paragraph)."""
    paragraphs = "\n".join(section(README, "## Architecture")).split("\n\n")
    for paragraph in paragraphs:
        if paragraph.startswith(title):
            return [match.group(1) for line in paragraph.splitlines()
                    if (match := ITEM.match(line))]
    return []


def differences(kind, existing, listed):
    missing = sorted(set(existing) - set(listed))
    unknown = sorted(set(listed) - set(existing))
    return [f"no line in README.md's architecture for the {kind} {name}" for name in missing] + [
        f"README.md's architecture names the {kind} {name}, which does not exist"
        for name in unknown]


def packages():
    """Every Python package of the project, as `path/`."""
    return {f"{init.parent.relative_to(ROOT)}/" for root in PACKAGE_ROOTS
            for init in (ROOT / root).rglob("__init__.py")}


def scheduler_jobs():
    from control_plane import scheduler

    defaults = {name: value for name, value in vars(config.Config).items() if name.isupper()}
    return {job.name for job in scheduler.jobs(Plain(defaults))}


def test_the_architecture_names_every_package_and_only_those():
    found = packages()
    assert {"control_plane/services/servers/", "agent/deploy/", "protocol/v1/"} <= found
    listed = architecture_items("**Packages**")
    # Directories that hold no Python package (migrations, the installer, the .proto)
    # may have their line too: they must exist.
    others = {name for name in listed if name not in found and (ROOT / name).is_dir()}
    wrong = differences("package", found | others, listed)
    assert not wrong, "\n".join(wrong)


def test_the_architecture_names_every_scheduler_job_and_only_those():
    found = scheduler_jobs()
    assert {"reaper", "webhooks", "ssh-servers"} <= found
    wrong = differences("scheduler job", found, architecture_items("**Scheduler jobs**"))
    assert not wrong, "\n".join(wrong)


def test_the_architecture_names_every_berth_admin_command_and_only_those():
    """The commands right under `berth admin`: its groups, and `bootstrap`."""
    found = {f"berth admin {name}" for name in command_tree().commands["admin"].commands}
    assert {"berth admin key", "berth admin agents"} <= found
    wrong = differences("command", found, architecture_items("**`berth admin`**"))
    assert not wrong, "\n".join(wrong)


# --- pyproject.toml -------------------------------------------------------------------

def test_every_file_named_in_pyproject_comments_exists():
    """A comment's path (`control_plane/...`, or `....py` under control_plane/) names
    a file or directory that is there."""
    named = {path for line in (ROOT / "pyproject.toml").read_text().splitlines()
             if "#" in line
             for path in re.findall(r"[\w/.-]+\.py\b|\bcontrol_plane/[\w/.-]*\w",
                                    line.split("#", 1)[1])}
    assert "control_plane/http_server.py" in named
    gone = sorted(path for path in named
                  if not (ROOT / path).exists() and not (ROOT / "control_plane" / path).exists())
    assert not gone, f"pyproject.toml's comments name what is not there: {gone}"
