"""Word (.docx): the body as it reads now (insertions in, deletions out), footnotes and
endnotes; comments and tracked changes as annotations with their own writer and date.

Read from the package's XML (lxml) rather than python-docx: python-docx's paragraph text
leaves out every run inside a tracked insertion (the move sample loses the moved sentence,
7 of its 16 words) and has no view of revisions, and it was 10x slower on the samples.
Word writes comment and revision dates in the writer's local time marked ``Z``; the clock
time is kept and the zone called unknown, unless ``commentsExtensible.xml`` gives the
comment's true UTC date.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mempp.importers.documents.common import (
    Annotation,
    Extracted,
    Package,
    Unreadable,
    attr,
    clean,
    core_properties,
    iso_date,
    local,
    word_local,
)

if TYPE_CHECKING:
    from lxml import etree

_CHANGES = {"ins": "insertion", "del": "deletion", "moveTo": "move", "moveFrom": None}


def extract(path: Path, max_chars: int) -> Extracted:
    with Package(path, "Word document") as package:
        package.require("word/document.xml")
        walker = _Walker()
        walker.block(package.xml("word/document.xml"))
        for part in ("word/footnotes.xml", "word/endnotes.xml"):
            if package.has(part):
                walker.block(package.xml(part), skip_separators=True)
        text = walker.text()
        if len(text) > max_chars:
            raise Unreadable(f"its text passes {max_chars:,} characters; split it to import it")
        extracted = Extracted(text=text)
        core_properties(package, extracted, "docx")
        extracted.annotations.extend(_comments(package, walker.anchors))
        extracted.annotations.extend(walker.changes)
    return extracted


class _Walker:
    """Walks WordprocessingML in document order: paragraphs to lines, table rows to
    ``cell | cell`` lines, tracked changes and comment ranges noted on the way."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.anchors: dict[str, list[str]] = {}
        self.changes: list[Annotation] = []
        self._open: set[str] = set()

    def text(self) -> str:
        return "\n".join(self.lines).strip()

    def block(self, root: etree._Element, *, skip_separators: bool = False) -> None:
        for element in root:
            name = local(element.tag)
            if (
                skip_separators
                and name in ("footnote", "endnote")
                and attr(element, "type") in ("separator", "continuationSeparator")
            ):
                continue
            if name == "p":
                self.lines.append(self.paragraph(element))
            elif name == "tbl":
                self.table(element)
            elif name == "AlternateContent":
                self._alternate(element)
            else:
                self.block(element, skip_separators=skip_separators)

    def table(self, table: etree._Element) -> None:
        for row in table:  # its own rows: a nested table is read by its cell
            if local(row.tag) != "tr":
                continue
            cells = []
            for cell in row:
                if local(cell.tag) != "tc":
                    continue
                inner = _Walker()
                inner._open, inner.anchors, inner.changes = self._open, self.anchors, self.changes
                inner.block(cell)
                cells.append(" ".join(line for line in inner.lines if line.strip()))
            self.lines.append(" | ".join(cells))

    def _alternate(self, element: etree._Element) -> None:
        # A text box is written twice, for new and for old readers: read the first choice.
        for choice in element:
            if local(choice.tag) == "Choice":
                self.block(choice)
                return
        for fallback in element:
            self.block(fallback)

    def paragraph(self, paragraph: etree._Element) -> str:
        out: list[str] = []
        self._runs(paragraph, out)
        for key in self._open:  # a comment's range goes on into the next paragraph
            self.anchors[key].append(" ")
        return "".join(out).rstrip()

    def _runs(self, element: etree._Element, out: list[str]) -> None:
        for node in element:
            name = local(node.tag)
            if name in _CHANGES:
                self._change(node, _CHANGES[name], out)
            elif name == "commentRangeStart":
                key = attr(node, "id") or ""
                self._open.add(key)
                self.anchors.setdefault(key, [])
            elif name == "commentRangeEnd":
                self._open.discard(attr(node, "id") or "")
            elif name in ("t", "delText"):
                piece = node.text or ""
                out.append(piece)
                for key in self._open:
                    self.anchors[key].append(piece)
            elif name == "tab":
                out.append("\t")
            elif name in ("br", "cr"):
                out.append("\n")
            elif name == "AlternateContent":
                choice = next((c for c in node if local(c.tag) == "Choice"), None)
                if choice is not None:
                    self._runs(choice, out)
            elif name in ("r", "hyperlink", "smartTag", "sdt", "sdtContent", "fldSimple"):
                self._runs(node, out)
            elif name in ("drawing", "pict", "object"):
                self._boxes(node, out)

    def _boxes(self, node: etree._Element, out: list[str]) -> None:
        """A text box's paragraphs, on lines of their own where the box is anchored."""
        for box in node.iter():
            if local(box.tag) == "txbxContent":
                inner = _Walker()
                inner._open, inner.anchors, inner.changes = self._open, self.anchors, self.changes
                inner.block(box)
                text = "\n".join(line for line in inner.lines if line.strip())
                if text:
                    out.append("\n" + text + "\n")

    def _change(self, node: etree._Element, kind: str | None, out: list[str]) -> None:
        """A tracked insertion or move stays in the text; a deletion's text and a move's
        old place do not. Each but the old place is noted with its writer and date."""
        if kind is None:
            return
        date, note = word_local(attr(node, "date"))
        context = "".join(out).strip()[-80:] or _tail(self.lines)
        if kind == "deletion":
            sink: list[str] = []
            self._runs(node, sink)
            changed = "".join(sink)
        else:
            before = len(out)
            self._runs(node, out)
            changed = "".join(out[before:])
        if changed.strip():
            self.changes.append(
                Annotation(
                    kind=kind,
                    text=changed.strip(),
                    author=_writer(attr(node, "author")),
                    date=date,
                    key=f"change-{attr(node, 'id') or len(self.changes) + 1}",
                    anchor=context,
                    date_note=note,
                )
            )


def _writer(value: str | None) -> str | None:
    """A comment's or change's writer; ``None`` for "Author", the name Word's "remove
    personal information" puts on every one (it names nobody)."""
    name = clean(value)
    return None if name == "Author" else name


def _tail(lines: list[str]) -> str:
    """Where a change is: the end of the paragraph before it (its own is not done yet)."""
    for line in reversed(lines):
        if line.strip():
            return line.strip()[-80:]
    return ""


def _comments(package: Package, anchors: dict[str, list[str]]) -> list[Annotation]:
    if not package.has("word/comments.xml"):
        return []
    utc = _utc_dates(package)
    threads = _threads(package)  # last paragraph id -> (parent's paragraph id, resolved)
    found: list[tuple[str, Annotation]] = []
    comment_of: dict[str, str] = {}  # a comment's last paragraph id -> its key
    for comment in package.xml("word/comments.xml"):
        if local(comment.tag) != "comment":
            continue
        key = attr(comment, "id") or str(len(found))
        lines = [_Walker().paragraph(p) for p in comment.iter() if local(p.tag) == "p"]
        text = "\n".join(line for line in lines if line.strip()).strip()
        para_ids = [attr(p, "paraId") for p in comment.iter() if local(p.tag) == "p"]
        last = next((p for p in reversed(para_ids) if p), "")
        comment_of[last] = f"comment-{key}"
        if not text:
            continue
        true_date = next((utc[p] for p in reversed(para_ids) if p in utc), None)
        date, note = (true_date, None) if true_date else word_local(attr(comment, "date"))
        noted = Annotation(
            kind="comment",
            text=text,
            author=_writer(attr(comment, "author")),
            date=date,
            key=f"comment-{key}",
            anchor="".join(anchors.get(key, [])).strip()[:200],
            date_note=note,
        )
        found.append((last, noted))
    for last, noted in found:
        parent, resolved = threads.get(last, ("", False))
        if parent in comment_of:
            noted.meta["reply_to"] = comment_of[parent]
        if resolved:
            noted.meta["resolved"] = True
    return [noted for _, noted in found]


def _threads(package: Package) -> dict[str, tuple[str, bool]]:
    """Word 2013+'s ``commentsExtended.xml``: which comment a reply answers and whether a
    comment was marked done, keyed by each comment's last paragraph id."""
    if not package.has("word/commentsExtended.xml"):
        return {}
    found = {}
    for node in package.xml("word/commentsExtended.xml"):
        para = attr(node, "paraId")
        if local(node.tag) == "commentEx" and para:
            found[para] = (attr(node, "paraIdParent") or "", attr(node, "done") == "1")
    return found


def _utc_dates(package: Package) -> dict[str, object]:
    """Comment paragraph id -> its UTC date, from ``commentsExtensible.xml`` (Word 2019+):
    the one comment date Word writes in true UTC."""
    if not (package.has("word/commentsExtensible.xml") and package.has("word/commentsIds.xml")):
        return {}
    durable = {}
    for node in package.xml("word/commentsIds.xml"):
        para, durable_id = attr(node, "paraId"), attr(node, "durableId")
        if para and durable_id:
            durable[durable_id] = para
    dates: dict[str, object] = {}
    for node in package.xml("word/commentsExtensible.xml"):
        moment = iso_date(attr(node, "dateUtc"))
        para = durable.get(attr(node, "durableId") or "")
        if moment is not None and para:
            dates[para] = moment
    return dates
