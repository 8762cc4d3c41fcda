"""A digest of every benchmark document's evidence rendering: run it on two source trees to
show that a change to the evidence renderer leaves the benchmarks' blocks byte for byte as
they were (so windows and recall cannot move), without ingesting or encoding anything.

Renders every LoCoMo turn and OrgMemBench document (both author modes) in item order, 50 to a
block, three ways (whole, a 40,000-character budget, packed), and prints the number of blocks
and one SHA-256 over their text and rows (offsets, lengths, spans).

    PYTHONPATH=<old tree>/src python benchmarks/bench_evidence_digest.py [DATASETS]
    PYTHONPATH=src python benchmarks/bench_evidence_digest.py [DATASETS]
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from mempp.bench import locomo, orgmembench
from mempp.records import Document, Hit, Record
from mempp.search.evidence import render_evidence
from mempp.search.packing import PackingOptions


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/datasets")
    digest = hashlib.sha256()
    blocks = 0
    loads = (
        locomo.load(root),
        orgmembench.load(root),
        orgmembench.load(root, author_from_header=True),
    )
    for bench in loads:
        hits: list[Hit] = []
        for n, item in enumerate(bench.items, 1):
            doc = Document.create(item.text, author=item.author, date=item.date, thread=item.thread)
            record = Record(
                id=n,
                text=doc.text,
                author=doc.author,
                date=item.date,
                tags=(),
                source=None,
                scope="s",
                ingested_at="-",
                state="active",
                superseded_by=None,
                thread=doc.thread,
            )
            hits.append(Hit(record=record, rank=len(hits) + 1, score=1.0))
            if len(hits) < 50:
                continue
            for options in ({}, {"budget": 40_000}, {"packing": PackingOptions(), "query": "plan"}):
                evidence = render_evidence(hits, **options)  # type: ignore[arg-type]
                digest.update(evidence.text.encode())
                rows = [(r.id, r.offset, r.length, r.spans) for r in evidence.rows]
                digest.update(repr(rows).encode())
                blocks += 1
            hits = []
    print(blocks, digest.hexdigest())


if __name__ == "__main__":
    main()
