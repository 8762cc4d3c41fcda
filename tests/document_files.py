"""Document files the tests and the documents benchmark build: small real PDFs (text drawn
in a content stream, an Info dictionary), Word packages (paragraphs, core properties,
comments), EPUB books and HTML pages. Each is a valid file of its format, written from
scratch so a test controls every byte of metadata."""

from __future__ import annotations

import zipfile
from pathlib import Path
from xml.sax.saxutils import escape

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
W14 = "http://schemas.microsoft.com/office/word/2010/wordml"
W15 = "http://schemas.microsoft.com/office/word/2012/wordml"


def make_pdf(
    path: Path, pages: list[str], info: dict[str, str] | None = None, xmp: str | None = None
) -> Path:
    """A PDF of one line of Helvetica per page (``pages``; an empty one has no text), with
    an Info dictionary and an XMP packet (``xmp``: the rdf:Description's inner XML)."""

    def literal(text: str) -> str:
        return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"

    objects: list[bytes] = []
    count = len(pages)
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(count))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, text in enumerate(pages):
        page = (
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {5 + 2 * i} 0 R "
            "/Resources << /Font << /F1 3 0 R >> >> >>"
        )
        stream = f"BT /F1 12 Tf 72 720 Td {literal(text)} Tj ET".encode("latin-1") if text else b""
        objects.append(page.encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    if xmp is not None:
        packet = (
            '<?xpacket begin="" id="W5M0MpCehiHzreSzNTczkc9d"?>'
            '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF '
            'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
            '<rdf:Description rdf:about="" xmlns:dc="http://purl.org/dc/elements/1.1/" '
            'xmlns:xmp="http://ns.adobe.com/xap/1.0/">'
            f"{xmp}</rdf:Description></rdf:RDF></x:xmpmeta>"
            '<?xpacket end="w"?>'
        ).encode()
        objects.append(
            b"<< /Type /Metadata /Subtype /XML /Length %d >>\nstream\n" % len(packet)
            + packet
            + b"\nendstream"
        )
        objects[0] = f"<< /Type /Catalog /Pages 2 0 R /Metadata {len(objects)} 0 R >>".encode()
    info_ref = ""
    if info:
        entries = " ".join(f"/{key} {literal(value)}" for key, value in info.items())
        objects.append(f"<< {entries} >>".encode("latin-1"))
        info_ref = f" /Info {len(objects)} 0 R"
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R{info_ref} >>\n".encode()
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    path.write_bytes(bytes(out))
    return path


def make_docx(
    path: Path,
    paragraphs: list[str],
    *,
    creator: str | None = "Ana Lima",
    modified: str | None = "2024-03-12T09:30:00Z",
    created: str | None = "2024-03-01T08:00:00Z",
    comments: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
    replies: dict[int, int] | None = None,
    done: tuple[int, ...] = (),
) -> Path:
    """A Word package: ``paragraphs``, core properties, and ``comments`` as (author, Word's
    local-time date, text), each anchored on the first paragraph; ``replies`` (comment ->
    the comment it answers) and ``done`` (comments marked resolved) in
    ``commentsExtended.xml``, as Word 2013+ writes them."""
    starts = "".join(f'<w:commentRangeStart w:id="{i}"/>' for i in range(len(comments)))
    ends = "".join(
        f'<w:commentRangeEnd w:id="{i}"/><w:r><w:commentReference w:id="{i}"/></w:r>'
        for i in range(len(comments))
    )
    body = []
    for number, text in enumerate(paragraphs):
        run = f'<w:r><w:t xml:space="preserve">{escape(text)}</w:t></w:r>'
        body.append(f"<w:p>{starts + run + ends if number == 0 else run}</w:p>")
    document = f'<w:document xmlns:w="{W}"><w:body>{"".join(body)}</w:body></w:document>'
    core = [
        '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/'
        'core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/" '
        'xmlns:dcterms="http://purl.org/dc/terms/" '
        'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">'
    ]
    if creator is not None:
        core.append(f"<dc:creator>{escape(creator)}</dc:creator>")
    for name, value in (("created", created), ("modified", modified)):
        if value is not None:
            core.append(f'<dcterms:{name} xsi:type="dcterms:W3CDTF">{value}</dcterms:{name}>')
    core.append("</cp:coreProperties>")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _content_types())
        archive.writestr("word/document.xml", document)
        archive.writestr("docProps/core.xml", "".join(core))
        if comments:
            items = "".join(
                f'<w:comment w:id="{i}" w:author="{escape(a)}" w:date="{d}">'
                f'<w:p w14:paraId="0000000{i}"><w:r><w:t>{escape(t)}</w:t></w:r></w:p></w:comment>'
                for i, (a, d, t) in enumerate(comments)
            )
            archive.writestr(
                "word/comments.xml",
                f'<w:comments xmlns:w="{W}" xmlns:w14="{W14}">{items}</w:comments>',
            )
        if replies or done:
            extended = "".join(
                f'<w15:commentEx w15:paraId="0000000{i}"'
                + (f' w15:paraIdParent="0000000{replies[i]}"' if i in (replies or {}) else "")
                + (' w15:done="1"' if i in done else ' w15:done="0"')
                + "/>"
                for i in range(len(comments))
            )
            archive.writestr(
                "word/commentsExtended.xml",
                f'<w15:commentsEx xmlns:w15="{W15}">{extended}</w15:commentsEx>',
            )
    return path


def _content_types() -> str:
    return (
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-'
        'officedocument.wordprocessingml.document.main+xml"/></Types>'
    )


def make_html(path: Path, title: str, body: str, meta: dict[str, str] | None = None) -> Path:
    tags = "".join(
        f'<meta name="{escape(k)}" content="{escape(v)}">' for k, v in (meta or {}).items()
    )
    path.write_text(
        f'<!doctype html><html><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"{tags}</head><body><nav>Home | About</nav><h1>{escape(title)}</h1>"
        f"<p>{escape(body)}</p></body></html>",
        encoding="utf-8",
    )
    return path


def make_epub(path: Path, chapters: list[str], *, creator: str, modified: str) -> Path:
    """An EPUB 3 book: ``chapters`` in spine order (listed in the manifest backwards, so
    the order must come from the spine)."""
    manifest = "".join(
        f'<item id="c{i}" href="text/ch{i}.xhtml" media-type="application/xhtml+xml"/>'
        for i in reversed(range(len(chapters)))
    )
    spine = "".join(f'<itemref idref="c{i}"/>' for i in range(len(chapters)))
    opf = (
        '<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f'<dc:identifier id="id">urn:test</dc:identifier><dc:title>A Book</dc:title>'
        f"<dc:creator>{escape(creator)}</dc:creator><dc:date>2020-05-01</dc:date>"
        f'<meta property="dcterms:modified">{modified}</meta></metadata>'
        f"<manifest>{manifest}</manifest><spine>{spine}</spine></package>"
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr(
            "META-INF/container.xml",
            '<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container" version="1.0">'
            '<rootfiles><rootfile full-path="OEBPS/book.opf" '
            'media-type="application/oebps-package+xml"/></rootfiles></container>',
        )
        archive.writestr("OEBPS/book.opf", opf)
        for i, text in enumerate(chapters):
            archive.writestr(
                f"OEBPS/text/ch{i}.xhtml",
                '<html xmlns="http://www.w3.org/1999/xhtml"><head><title>c</title></head>'
                f"<body><p>{escape(text)}</p></body></html>",
            )
    return path


def make_odt(
    path: Path,
    paragraphs: list[str],
    *,
    creator: str,
    date: str,
    note: tuple[str, str, str] | None = None,
) -> Path:
    """An OpenDocument text: ``paragraphs``, ``meta.xml`` with ``creator`` and ``date``, and
    ``note`` (author, date, text) as an annotation inside the first paragraph."""
    office = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
    text_ns = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
    dc = "http://purl.org/dc/elements/1.1/"
    meta_ns = "urn:oasis:names:tc:opendocument:xmlns:meta:1.0"
    body = []
    for number, para in enumerate(paragraphs):
        inner = escape(para)
        if number == 0 and note is not None:
            author, when, said = note
            inner += (
                f"<office:annotation><dc:creator>{escape(author)}</dc:creator>"
                f"<dc:date>{when}</dc:date><text:p>{escape(said)}</text:p></office:annotation>"
            )
        body.append(f"<text:p>{inner}</text:p>")
    content = (
        f'<office:document-content xmlns:office="{office}" xmlns:text="{text_ns}" '
        f'xmlns:dc="{dc}"><office:body><office:text>{"".join(body)}'
        "</office:text></office:body></office:document-content>"
    )
    meta = (
        f'<office:document-meta xmlns:office="{office}" xmlns:dc="{dc}" xmlns:meta="{meta_ns}">'
        f"<office:meta><meta:initial-creator>{escape(creator)}</meta:initial-creator>"
        f"<dc:creator>{escape(creator)}</dc:creator><dc:date>{date}</dc:date>"
        "</office:meta></office:document-meta>"
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        archive.writestr("content.xml", content)
        archive.writestr("meta.xml", meta)
    return path


P = "http://schemas.openxmlformats.org/presentationml/2006/main"
A = "http://schemas.openxmlformats.org/drawingml/2006/main"
R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
P188 = "http://schemas.microsoft.com/office/powerpoint/2018/8/main"


def make_pptx(
    path: Path, slide_text: str, comment: tuple[str, str, str], reply: tuple[str, str, str]
) -> Path:
    """A one-slide deck with a modern comment (PowerPoint 365: ``authors.xml``,
    ``modernComment_*.xml``) and a reply to it, each (author, UTC date, text)."""

    def body(text: str) -> str:
        return (
            f"<p188:txBody><a:bodyPr/><a:p><a:r><a:t>{escape(text)}</a:t></a:r></a:p></p188:txBody>"
        )

    rel = "http://schemas.openxmlformats.org/package/2006/relationships"
    presentation = (
        f'<p:presentation xmlns:p="{P}" xmlns:r="{R}"><p:sldIdLst>'
        '<p:sldId id="256" r:id="rId2"/></p:sldIdLst></p:presentation>'
    )
    slide = (
        f'<p:sld xmlns:p="{P}" xmlns:a="{A}"><p:cSld><p:spTree><p:sp><p:txBody><a:bodyPr/>'
        f"<a:p><a:r><a:t>{escape(slide_text)}</a:t></a:r></a:p>"
        '<a:p><a:fld type="slidenum"><a:t>1</a:t></a:fld></a:p></p:txBody></p:sp>'
        "</p:spTree></p:cSld></p:sld>"
    )
    authors = (
        f'<p188:authorLst xmlns:p188="{P188}">'
        f'<p188:author id="{{A1}}" name="{escape(comment[0])}" initials="X" userId="x"/>'
        f'<p188:author id="{{A2}}" name="{escape(reply[0])}" initials="Y" userId="y"/>'
        "</p188:authorLst>"
    )
    comments = (
        f'<p188:cmLst xmlns:p188="{P188}" xmlns:a="{A}">'
        f'<p188:cm id="{{C1}}" authorId="{{A1}}" created="{comment[1]}">{body(comment[2])}'
        f'<p188:replyLst><p188:reply id="{{R1}}" authorId="{{A2}}" created="{reply[1]}">'
        f"{body(reply[2])}</p188:reply></p188:replyLst></p188:cm></p188:cmLst>"
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("ppt/presentation.xml", presentation)
        archive.writestr(
            "ppt/_rels/presentation.xml.rels",
            f'<Relationships xmlns="{rel}"><Relationship Id="rId2" Type="{R}/slide" '
            'Target="slides/slide1.xml"/></Relationships>',
        )
        archive.writestr("ppt/slides/slide1.xml", slide)
        archive.writestr(
            "ppt/slides/_rels/slide1.xml.rels",
            f'<Relationships xmlns="{rel}"><Relationship Id="rId1" '
            'Type="http://schemas.microsoft.com/office/2018/10/relationships/comments" '
            'Target="../comments/modernComment_100_1.xml"/></Relationships>',
        )
        archive.writestr("ppt/comments/modernComment_100_1.xml", comments)
        archive.writestr("ppt/authors.xml", authors)
    return path
