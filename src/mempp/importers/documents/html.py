"""HTML (.html, .htm) and the XHTML of EPUB: text by inscriptis (the layout of tables and
lists kept, scripts and styles dropped), author and dates from the page's ``<meta>`` tags.

The page is stored whole, navigation included: a saved page is the organization's copy of
it, and cutting its "boilerplate" (trafilatura's main-content extraction) is a guess that
drops tables and sections as readily as menus. The charset comes from a byte-order mark,
else the page's ``<meta charset>`` / ``http-equiv``, else UTF-8, else Windows-1252 (what
browsers assume); a page that declares a charset Python does not know is read as UTF-8 if
it is valid UTF-8 (with a warning), else reported.
"""

from __future__ import annotations

import codecs
import re
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from mempp.importers.documents.common import Extracted, Unreadable, clean, iso_date, need

if TYPE_CHECKING:
    from lxml import etree

_DECLARED = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# Meta names in the order they are trusted, lowercased; the first found wins.
_AUTHOR = (
    "author",
    "article:author",
    "dc.creator",
    "dc:creator",
    "dcterms.creator",
    "citation_author",
    "bepress_citation_author",
    "parsely-author",
    "byl",
)
_MODIFIED = (
    "article:modified_time",
    "og:updated_time",
    "dcterms.modified",
    "dc.date.modified",
    "last-modified",
    "lastmod",
    "revised",
)
_CREATED = (
    "article:published_time",
    "dcterms.created",
    "dc.date.created",
    "dcterms.date",
    "dc.date",
    "dc:date",
    "date",
    "citation_date",
    "citation_publication_date",
    "bepress_citation_date",
    "pubdate",
)


def extract(path: Path, max_chars: int) -> Extracted:
    data = path.read_bytes()
    text, warning = decode(data)
    extracted = page(text, max_chars)
    if warning:
        extracted.warnings.append(warning)
    return extracted


def decode(data: bytes) -> tuple[str, str | None]:
    """The page's text and a warning when its charset had to be guessed."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, "replace"), None
    match = _DECLARED.search(data[:4096])
    declared = match.group(1).decode("ascii").strip().lower() if match else None
    if declared is not None:
        try:
            codec = codecs.lookup(declared).name
        except LookupError:
            try:
                return data.decode("utf-8"), (
                    f"declares the charset {declared!r}, which is unknown; read as UTF-8, "
                    "which its bytes are"
                )
            except UnicodeDecodeError:
                raise Unreadable(
                    f"declares the charset {declared!r}, which is unknown, and its bytes are "
                    "not UTF-8: convert it to UTF-8 to import it"
                ) from None
        try:
            return data.decode(codec), None
        except UnicodeDecodeError:
            return data.decode(codec, "replace"), (
                f"bytes that are not {declared} replaced with U+FFFD"
            )
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return data.decode(
            "cp1252", "replace"
        ), "no charset declared and not UTF-8: read as Windows-1252"


def page(markup: str, max_chars: int) -> Extracted:
    """An HTML document's text and metadata."""
    lxml_html = need("lxml.html", "lxml")
    inscriptis = need("inscriptis", "inscriptis")
    config = need("inscriptis.model.config", "inscriptis")
    if not markup.strip():
        return Extracted(text="")
    try:
        tree = lxml_html.document_fromstring(markup.encode("utf-8"), parser=_parser(lxml_html))
    except (ValueError, lxml_html.etree.ParserError) as exc:
        raise Unreadable(f"not readable HTML ({exc})") from None
    extracted = Extracted(text="")
    _metadata(tree, extracted)
    text = inscriptis.Inscriptis(tree, config.ParserConfig(display_links=False)).get_text()
    # inscriptis indents nested blocks by CSS; on a saved page that indentation was a third
    # of the text (Wikipedia's: 138,000 -> 90,000 characters) and carries nothing a reader
    # needs: list items keep their bullets.
    text = re.sub(r"(?m)^[ \t]+|[ \t]+$", "", text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    if len(text) > max_chars:
        raise Unreadable(f"its text passes {max_chars:,} characters; split it to import it")
    extracted.text = text
    return extracted


def _parser(lxml_html: object) -> object:
    return lxml_html.HTMLParser(encoding="utf-8", no_network=True, remove_comments=True)  # type: ignore[attr-defined]


def _metadata(tree: etree._Element, extracted: Extracted) -> None:
    metas: dict[str, str] = {}
    for meta in tree.iter("meta"):
        key = (meta.get("name") or meta.get("property") or meta.get("itemprop") or "").lower()
        value = clean(meta.get("content"))
        if key and value and key not in metas:
            metas[key] = value
    for key in _AUTHOR:
        if key in metas:
            extracted.author, extracted.author_from = metas[key], f"html meta {key}"
            break
    for key in _MODIFIED:
        moment = _date(metas.get(key))
        if moment is not None:
            extracted.modified, extracted.modified_from = moment, f"html meta {key}"
            break
    for key in _CREATED:
        moment = _date(metas.get(key))
        if moment is not None:
            extracted.created, extracted.created_from = moment, f"html meta {key}"
            break
    title = tree.find(".//title")
    if title is not None:
        extracted.title = clean(title.text_content())
    for key in ("description", "dc.language", "og:url"):
        if key in metas:
            extracted.meta[key.replace("dc.", "").replace("og:", "")] = metas[key][:500]


def _date(value: str | None) -> datetime | None:
    if value is None:
        return None
    return iso_date(value.replace("/", "-")[:35])
