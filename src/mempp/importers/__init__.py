"""Importers: where an organization's record lives (Slack exports, mailboxes, folders),
read into documents behind one protocol.

    from mempp import Memory
    from mempp.importers import get, run_import

    with Memory("org.db") as memory:
        report = run_import(memory, get("slack"), "export.zip")
        print(report.summary())

``get(name)`` returns an importer: one of mempp's (``slack``, ``mail``, ``folder``) or one a
package registers in the ``mempp.importers`` entry-point group (see ``docs/importers.md``).
Each importer's ``read(path)`` yields :data:`Item` values; :func:`run_import` stores them.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points

from mempp.errors import InvalidInput, MemppError
from mempp.importers.base import (
    Importer,
    ImportReport,
    Item,
    ItemError,
    Notice,
    Skipped,
    run_import,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "ImportReport",
    "Importer",
    "Item",
    "ItemError",
    "Notice",
    "Skipped",
    "get",
    "names",
    "run_import",
]

ENTRY_POINT_GROUP = "mempp.importers"


def _builtin() -> dict[str, Callable[..., Importer]]:
    from mempp.importers.confluence import ConfluenceImporter
    from mempp.importers.discord import DiscordImporter
    from mempp.importers.folder import FolderImporter
    from mempp.importers.github import GitHubImporter
    from mempp.importers.gitlab import GitLabImporter
    from mempp.importers.jira import JiraImporter
    from mempp.importers.keep import KeepImporter
    from mempp.importers.mail import MailImporter
    from mempp.importers.notion import NotionImporter
    from mempp.importers.slack import SlackImporter
    from mempp.importers.teams import TeamsImporter
    from mempp.importers.transcript import TranscriptImporter
    from mempp.importers.trello import TrelloImporter

    return {
        "slack": SlackImporter,
        "mail": MailImporter,
        "folder": lambda: FolderImporter(others=_other_than_folder),
        "github": GitHubImporter,
        "gitlab": GitLabImporter,
        "jira": JiraImporter,
        "confluence": ConfluenceImporter,
        "notion": NotionImporter,
        "discord": DiscordImporter,
        "keep": KeepImporter,
        "teams": TeamsImporter,
        "transcript": TranscriptImporter,
        "trello": TrelloImporter,
    }


def _other_than_folder() -> list[Importer]:
    """Every importer but the folder's: a folder names what it holds of their inputs."""
    return [get(name) for name in names() if name != "folder"]


def _entry_points() -> dict[str, EntryPoint]:
    return {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}


def names() -> list[str]:
    """The names ``get`` accepts, sorted: mempp's and those of installed packages."""
    return sorted(set(_builtin()) | set(_entry_points()))


def get(name: str, **options: object) -> Importer:
    """A new importer by name, built with ``options`` as keyword arguments (none: its
    defaults). mempp's own names come first: a package cannot replace them. An option the
    importer does not take is an ``InvalidInput`` naming it."""
    factory = _builtin().get(name)
    if factory is None:
        point = _entry_points().get(name)
        if point is None:
            raise InvalidInput(f"unknown importer {name!r} (choose from: {', '.join(names())})")
        try:
            factory = point.load()
        except Exception as exc:  # a third party's import error, told in one line
            raise MemppError(f"the {name!r} importer ({point.value}) cannot load: {exc}") from exc
    try:
        importer = factory(**options)
    except TypeError as exc:
        if not options:
            raise
        raise InvalidInput(
            f"the {name!r} importer takes no option {', '.join(sorted(options))} ({exc})"
        ) from None
    if not isinstance(importer, Importer):
        raise MemppError(
            f"the {name!r} importer does not implement the Importer protocol "
            "(name, description, recognizes, read)"
        )
    return importer
