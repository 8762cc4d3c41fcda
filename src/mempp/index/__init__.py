"""In-RAM indexes the engines keep beside their tables, exact by construction: the BM25
replica of FTS5's ``bm25()`` (``bm25``), the tag postings (``tags``), the int8 vector scan
rescored in float32 (``vectors``), and the checksummed array files they are saved in
(``array_file``). Pure data structures over numpy: they import nothing of mempp but each
other and ``mempp.threads``; the stores in ``mempp.store`` load, catch up and drop them.
"""
