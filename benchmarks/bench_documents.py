"""Documents in folders: files/s and records/s per format, on the real samples
(``shared/realdata/docs``) and on a generated folder of small PDF, Word and HTML files; the
share of an ingest spent outside the encoder; and how many documents had their author and
date from their own metadata.

    python benchmarks/bench_documents.py --generated 10000 --encode 300

Parsing is timed as ``mempp ingest --dry-run`` does it (read, no store); an ingest with the
real encoder (MiniLM) into a fresh SQLite file is timed on the real samples and on the
first ``--encode`` generated files, with the encoder's own time measured around its calls.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from document_files import make_docx, make_html, make_pdf
from mempp import Document, Memory
from mempp.importers import get, run_import
from mempp.importers.documents.read import FORMATS, read_document

WORDS = "budget launch review hiring roadmap vendor contract audit quarter office".split()


def real_root() -> Path | None:
    repo = Path(__file__).resolve().parents[1]
    for candidate in (repo.parent / "shared" / "realdata", Path("/work/shared/realdata")):
        if (candidate / "docs").is_dir():
            return candidate / "docs"
    return None


def generate(folder: Path, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        words = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(40))
        text = f"Note {i}: {words}."
        kind = i % 3
        if kind == 0:
            make_docx(folder / f"n{i:05d}.docx", [f"Note {i}", text], creator=f"user{i % 50}")
        elif kind == 1:
            meta = {"author": f"user{i % 50}", "dcterms.modified": f"2024-01-{1 + i % 28:02d}"}
            make_html(folder / f"n{i:05d}.html", f"Note {i}", text, meta)
        else:
            info = {"Author": f"user{i % 50}", "ModDate": f"D:202402{1 + i % 28:02d}"}
            make_pdf(folder / f"n{i:05d}.pdf", [text[:90]], info)


def make_large_pdf(path: Path, megabytes: int, pages: int = 200) -> Path:
    """A real PDF of ``megabytes``: ``pages`` pages of text, each with a large image stream
    attached (1 MiB of bytes per MiB asked, spread over the pages), as scanned books are."""
    make_pdf(path, [f"Page {i} of a large report" for i in range(pages)])
    data = path.read_bytes()
    # Append the image objects as an incremental update's unused objects: the file is
    # valid, every byte is on disk, and a reader that loaded it whole would hold them all.
    start = data.rfind(b"trailer")
    size = int(data[start:].split(b"/Size ")[1].split()[0])
    chunk = (megabytes << 20) // pages
    blob = bytes(range(256)) * (chunk // 256)
    with path.open("ab") as out:
        offsets = []
        position = len(data)
        for number in range(size, size + pages):
            offsets.append(position)
            head = b"%d 0 obj\n<< /Type /XObject /Subtype /Image /Width 1 /Height 1 " % number
            head += b"/BitsPerComponent 8 /ColorSpace /DeviceGray /Length %d >>\nstream\n" % len(
                blob
            )
            piece = head + blob + b"\nendstream\nendobj\n"
            out.write(piece)
            position += len(piece)
        xref = position
        out.write(b"xref\n%d %d\n" % (size, pages))
        for offset in offsets:
            out.write(b"%010d 00000 n \n" % offset)
        previous = int(data[data.rfind(b"startxref") :].split()[1])
        out.write(
            b"trailer\n<< /Size %d /Root 1 0 R /Prev %d >>\nstartxref\n%d\n%%%%EOF\n"
            % (size + pages, previous, xref)
        )
    return path


PEAK = """
import resource, sys, time
from pathlib import Path
from mempp.importers.documents import pdf, read
import pypdfium2, lxml.etree
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
found = list(read.read_document(Path(sys.argv[1]), sys.argv[1]))
took = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(type(found[0]).__name__, len(getattr(found[0], "text", "")), took, before, after)
"""


def large(megabytes: int) -> None:
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        path = make_large_pdf(Path(tmp) / "large.pdf", megabytes)
        size = path.stat().st_size >> 20
        result = subprocess.run(
            [sys.executable, "-c", PEAK, str(path)], capture_output=True, text=True, check=True
        )
        kind, chars, took, before, after = result.stdout.split()
        print(
            f"\na {size} MiB PDF (200 pages of text, {size} MiB of images): {kind}, "
            f"{int(chars):,} characters in {float(took):.1f} s; peak RSS "
            f"{int(before) >> 10} MiB after imports, {int(after) >> 10} MiB after the read"
        )


def parse(files: list[Path]) -> dict[str, list[float]]:
    """Per format: [files, records, seconds, author from metadata, date from metadata]."""
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0, 0])
    for file in files:
        kind = FORMATS[file.suffix.lower()][0]
        start = time.perf_counter()
        found = list(read_document(file, str(file)))
        row = out[kind]
        row[2] += time.perf_counter() - start
        row[0] += 1
        docs = [d for d in found if isinstance(d, Document)]
        row[1] += len(docs)
        main = next((d for d in docs if d.meta and "format" in d.meta), None)
        if main is not None:
            row[3] += main.meta["author_from"] != "none"
            row[4] += main.meta["date_from"] not in ("file name", "file modification time")
    return out


class Timed:
    """An encoder wrapper that adds up the time spent in it."""

    def __init__(self, inner: object) -> None:
        self.inner, self.seconds = inner, 0.0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def embed(self, texts):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        try:
            return self.inner.embed(texts)  # type: ignore[attr-defined]
        finally:
            self.seconds += time.perf_counter() - start


def ingest(paths: list[Path]) -> tuple[int, float, float]:
    from mempp.encoders import embedder_named

    with tempfile.TemporaryDirectory() as tmp:
        encoder = Timed(embedder_named("minilm"))
        with Memory(str(Path(tmp) / "m.db"), embedder=encoder) as memory:  # type: ignore[arg-type]
            memory.add("warm the encoder up")
            encoder.seconds = 0.0
            start = time.perf_counter()
            report = run_import(memory, get("folder"), paths)
            total = time.perf_counter() - start
    return report.added, total, encoder.seconds


HEADER = (
    "| format | files | records | s | files/s | records/s "
    "| author from metadata | date from metadata |"
)


def table(title: str, rows: dict[str, list[float]]) -> None:
    print(f"\n{title}\n{HEADER}\n|---|---|---|---|---|---|---|---|")
    total = [0.0] * 5
    for kind in sorted(rows):
        total = [x + y for x, y in zip(total, rows[kind], strict=True)]
        print(_row(kind, rows[kind]))
    print(_row("all", total))


def _row(kind: str, row: list[float]) -> str:
    f, r, s, a, d = row
    return (
        f"| {kind} | {f:.0f} | {r:.0f} | {s:.2f} | {f / s:,.0f} | {r / s:,.0f} "
        f"| {a:.0f} of {f:.0f} | {d:.0f} of {f:.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--generated", type=int, default=10000)
    parser.add_argument(
        "--encode", type=int, default=300, help="generated files ingested with MiniLM"
    )
    parser.add_argument("--large-mb", type=int, default=0, help="only read a PDF this large")
    args = parser.parse_args()
    if args.large_mb:
        large(args.large_mb)
        return
    real = real_root()
    if real is not None:
        files = sorted(p for p in real.rglob("*") if p.is_file())
        parse(files[:3])  # imports and first-call costs out of the figures
        table(f"real samples ({real}), parse only", parse(files))
        added, total, encoder = ingest([real])
        print(
            f"\nreal samples, ingest with MiniLM: {added} records in {total:.1f} s, "
            f"{encoder:.1f} s in the encoder, {100 * (total - encoder) / total:.1f}% outside"
        )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "gen"
        start = time.perf_counter()
        generate(folder, args.generated)
        print(f"\ngenerated {args.generated} files in {time.perf_counter() - start:.1f} s")
        files = sorted(folder.iterdir())
        table(f"generated folder ({args.generated} files), parse only", parse(files))
        start = time.perf_counter()
        report = run_import(None, get("folder"), folder, dry_run=True)
        dry = time.perf_counter() - start
        print(
            f"\ngenerated, the whole dry run (walk, hash, parse, count): {report.added} "
            f"in {dry:.1f} s, {report.added / dry:,.0f} records/s; skipped {dict(report.skipped)}"
        )
        if args.encode:
            subset = folder.parent / "subset"
            subset.mkdir()
            for file in files[: args.encode]:
                (subset / file.name).write_bytes(file.read_bytes())
            added, total, encoder = ingest([subset])
            print(
                f"generated, ingest of {args.encode} files with MiniLM: {added} records in "
                f"{total:.1f} s, {encoder:.1f} s in the encoder, "
                f"{100 * (total - encoder) / total:.1f}% outside"
            )


if __name__ == "__main__":
    main()
