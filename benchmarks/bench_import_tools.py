"""Items per second of the tool importers (github, gitlab, jira, confluence, notion), on the
real samples in ``../shared/realdata/sources`` and on large exports generated here in each
tool's format, and what each import yields: items found, records stored, authors resolved,
dates found.

Two passes per export:

- ``read``: the importer's parse alone (every item read, nothing stored), items/s;
- ``store``: the import into a fresh SQLite store with random unit vectors in place of the
  encoder (what the store's write path costs, without the encoder's), on the first
  ``--store`` items of the generated export, and on each real sample whole.

``python benchmarks/bench_import_tools.py --items 100000 --store 5000`` prints a Markdown
table; ``--only github,jira`` limits the importers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench_import import RandomEmbedder
from mempp import Document, Memory
from mempp.importers import get, run_import

WORDS = (
    "deploy cache latency checkout payment retry queue index review merge branch release "
    "customer invoice schema migration timeout outage dashboard alert rollback feature flag"
).split()
START = datetime(2023, 1, 1, tzinfo=UTC)


def _text(number: int, length: int = 18) -> str:
    """Words that differ from item to item (the store would skip exact repeats)."""
    words = " ".join(WORDS[(number * 7 + i * 13) % len(WORDS)] for i in range(length))
    return f"{words} (item {number})"


def _iso(number: int) -> str:
    return (START + timedelta(minutes=7 * number)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pages(items: list[dict], per_page: int = 100) -> str:
    """Pages as `gh api --paginate --include` writes them."""
    out = []
    for start in range(0, len(items), per_page):
        out.append(
            'HTTP/2.0 200 OK\r\nContent-Type: application/json\r\nLink: <x>; rel="next"\r\n\r\n'
        )
        out.append(json.dumps(items[start : start + per_page]))
    return "".join(out)


def github_export(root: Path, items: int) -> Path:
    root.mkdir(parents=True)
    api, web = "https://api.github.com/repos/acme/app", "https://github.com/acme/app"
    issues = max(items // 10, 1)

    def user(n: int) -> dict:
        return {"login": f"dev{n % 300}", "id": n % 300, "type": "User", "avatar_url": "a"}

    made = [
        {
            "url": f"{api}/issues/{n}",
            "html_url": f"{web}/issues/{n}",
            "number": n,
            "title": _text(n, 6),
            "body": _text(n),
            "user": user(n),
            "labels": [{"name": WORDS[n % 5]}],
            "state": "closed" if n % 3 == 0 else "open",
            "created_at": _iso(n),
            "updated_at": _iso(n),
            "closed_at": _iso(n + 500) if n % 3 == 0 else None,
            "closed_by": user(n + 1) if n % 3 == 0 else None,
        }
        for n in range(1, issues + 1)
    ]
    (root / "issues.http").write_text(_pages(made))
    comments = [
        {
            "html_url": f"{web}/issues/{1 + n % issues}#issuecomment-{n}",
            "issue_url": f"{api}/issues/{1 + n % issues}",
            "id": n,
            "user": user(n * 3),
            "created_at": _iso(n + 10),
            "updated_at": _iso(n + 10),
            "body": _text(n + 1),
        }
        for n in range(items - issues - items // 10)
    ]
    (root / "comments.http").write_text(_pages(comments))
    reviews = [
        {
            "id": n,
            "user": user(n),
            "body": _text(n + 2, 8),
            "state": "APPROVED",
            "html_url": f"{web}/pull/{1 + n % issues}#pullrequestreview-{n}",
            "pull_request_url": f"{api}/pulls/{1 + n % issues}",
            "submitted_at": _iso(n + 20),
        }
        for n in range(items // 10)
    ]
    (root / "reviews.json").write_text(json.dumps(reviews))
    return root


def gitlab_export(root: Path, items: int) -> Path:
    root.mkdir(parents=True)
    web = "https://gitlab.example.org/acme/app"
    issues = max(items // 10, 1)

    def person(n: int) -> dict:
        login = f"dev{n % 300}"
        return {"id": n % 300, "username": login, "name": f"Developer {n % 300}",
                "state": "active", "web_url": f"https://gitlab.example.org/{login}"}  # fmt: skip

    made = [
        {
            "id": 10_000 + n,
            "iid": n,
            "project_id": 7,
            "title": _text(n, 6),
            "description": _text(n),
            "state": "opened",
            "created_at": _iso(n),
            "updated_at": _iso(n),
            "closed_at": _iso(n + 400) if n % 4 == 0 else None,
            "closed_by": person(n) if n % 4 == 0 else None,
            "labels": [WORDS[n % 4]],
            "author": person(n),
            "web_url": f"{web}/-/issues/{n}",
        }
        for n in range(1, issues + 1)
    ]
    (root / "issues.json").write_text(_pages(made))
    notes = [
        {
            "id": n,
            "body": _text(n + 3),
            "author": person(n * 7),
            "created_at": _iso(n + 5),
            "updated_at": _iso(n + 5),
            "system": n % 20 == 0,
            "noteable_type": "Issue",
            "noteable_iid": 1 + n % issues,
            "project_id": 7,
        }
        for n in range(items - issues)
    ]
    (root / "notes.json").write_text(_pages(notes))
    return root


def jira_export(root: Path, items: int) -> Path:
    from xml.sax.saxutils import escape

    root.mkdir(parents=True)
    parts = ['<!-- RSS generated by JIRA -->\n<rss version="0.92"><channel>']
    issues = max(items // 5, 1)
    for n in range(1, issues + 1):
        day = (START + timedelta(hours=5 * n)).strftime("%a, %d %b %Y %H:%M:%S +0000")
        comments = "".join(
            f'<comment id="{n * 10 + c}" author="acc-{(n + c) % 200}" created="{day}">'
            f"{escape('<p>' + _text(n + c) + '</p>')}</comment>"
            for c in range(4)
        )
        parts.append(
            f"<item><title>[OPS-{n}] x</title><link>https://acme.atlassian.net/browse/OPS-{n}</link>"
            f'<project id="1" key="OPS">Ops</project><key id="{n}">OPS-{n}</key>'
            f"<summary>{_text(n, 6)}</summary><description>{escape('<p>' + _text(n) + '</p>')}"
            f"</description><type>Bug</type><status>Open</status>"
            f'<reporter accountid="acc-{n % 200}">Person {n % 200}</reporter>'
            f"<created>{day}</created><updated>{day}</updated><comments>{comments}</comments></item>"
        )
    parts.append("</channel></rss>")
    (root / "export.xml").write_text("".join(parts))
    return root


def confluence_export(root: Path, items: int) -> Path:
    root.mkdir(parents=True)
    for n in range(max(items // 3, 1)):
        comments = "".join(
            f'<tr><td><a name="comment-{n * 10 + c}"></a><p>{_text(n + c)}</p>'
            f'<div class="smallfont">Posted by Person {c} at Mar 0{1 + c}, 2024 10:15</div>'
            "</td></tr>"
            for c in range(2)
        )
        (root / f"Page-{n}_{100000 + n}.html").write_text(
            f"<html><head><title>Eng : Page {n}</title></head><body><div id='main-content' "
            f"class='wiki-content'><h2>Part</h2><p>{_text(n, 60)}</p><script>x()</script></div>"
            f"<div class='page-metadata'>Created by <span class='author'>Person {n % 50}</span>"
            f" on Jan {1 + n % 28:02d}, 2024</div><div class='pageSection group'>"
            f"<h2 id='comments'>Comments:</h2><table><tbody>{comments}</tbody></table></div>"
            "<div id='footer'>Document generated by Confluence on Mar 25, 2024 16:02</div>"
            "</body></html>"
        )
    return root


def notion_export(root: Path, items: int) -> Path:
    database = "Tasks 0123456789abcdef0123456789abcdef"
    (root / database).mkdir(parents=True)
    rows = ["Name,Status,Date"]
    for n in range(items):
        day = (START + timedelta(days=n % 700)).strftime("%B %-d, %Y")
        rows.append(f'Task {n},Done,"{day}"')
        if n % 2 == 0:  # half the rows have a page
            (root / database / f"Task {n} {n:032x}.md").write_text(
                f"# Task {n}\n\nStatus: Done\nDate: {day}\n\n{_text(n)}\n"
            )
    (root / f"{database}_all.csv").write_text("\n".join(rows) + "\n")
    return root


GENERATORS: dict[str, Callable[[Path, int], Path]] = {
    "github": github_export,
    "gitlab": gitlab_export,
    "jira": jira_export,
    "confluence": confluence_export,
    "notion": notion_export,
}
SAMPLES = {
    "github": "github/forgejo-recorded",
    "gitlab": "gitlab/forgejo-recorded",
    "jira": "jira/focalboard/jira-export.xml",
    "confluence": "confluence/hangzhou_house_knowledge/index.html",
    "notion": "notion/obsidian-importer",  # both zips
}


def samples_root() -> Path | None:
    for root in (Path(__file__).resolve().parents[1].parent / "shared", Path("/work/shared")):
        if (root / "realdata" / "sources").is_dir():
            return root / "realdata" / "sources"
    return None


def read_pass(name: str, paths: list[Path]) -> dict[str, float]:
    importer = get(name)
    begin = time.perf_counter()
    found = docs = authors = dates = 0
    names: set[str] = set()
    for path in paths:
        for item in importer.read(path):
            found += 1
            if isinstance(item, Document):
                docs += 1
                authors += item.author is not None
                dates += item.date is not None
                if item.author:
                    names.add(item.author)
    seconds = time.perf_counter() - begin
    return {"items": found, "docs": docs, "authors": authors, "people": len(names),
            "dates": dates, "seconds": seconds}  # fmt: skip


def store_pass(name: str, paths: list[Path], db: Path) -> dict[str, float]:
    with Memory(db, embedder=RandomEmbedder()) as memory:
        begin = time.perf_counter()
        report = run_import(memory, get(name), paths)
        seconds = time.perf_counter() - begin
        again = run_import(memory, get(name), paths)
    return {"stored": report.added, "failed": report.failed, "seconds": seconds,
            "again": again.added}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--store", type=int, default=5_000)
    parser.add_argument("--only", default=",".join(GENERATORS))
    args = parser.parse_args()
    chosen = [n for n in args.only.split(",") if n]
    real = samples_root()
    lines = [
        "| importer | export | items found | records | with an author (distinct) | dated "
        "| read items/s | stored | store items/s | re-import adds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="mempp-bench-tools-") as folder:
        work = Path(folder)
        for name in chosen:
            runs: list[tuple[str, list[Path], list[Path]]] = []
            if real is not None and (real / SAMPLES[name]).exists():
                sample = real / SAMPLES[name]
                paths = sorted(sample.glob("*.zip")) if name == "notion" else [sample]
                runs.append(("real sample", paths, paths))
            big = GENERATORS[name](work / f"{name}-big", args.items)
            small = GENERATORS[name](work / f"{name}-small", args.store)
            runs.append((f"generated {args.items:,}", [big], [small]))
            for label, read_paths, store_paths in runs:
                got = read_pass(name, read_paths)
                stored = store_pass(name, store_paths, work / f"{name}-{len(lines)}.db")
                store_items = got["items"] if store_paths is read_paths else None
                if store_items is None:
                    store_items = read_pass(name, store_paths)["items"]
                lines.append(
                    f"| {name} | {label} | {got['items']:,} | {got['docs']:,} | "
                    f"{got['authors']:,} ({got['people']:,}) | {got['dates']:,} | "
                    f"{got['items'] / got['seconds']:,.0f} | {stored['stored']:,} of "
                    f"{store_items:,} items | {store_items / stored['seconds']:,.0f} | "
                    f"{stored['again']} |"
                )
                print(lines[-1], file=sys.stderr, flush=True)
            shutil.rmtree(big, ignore_errors=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
