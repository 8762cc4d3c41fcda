"""Documents an organization keeps (PDF, Word, PowerPoint, Excel, OpenDocument, EPUB, HTML,
RTF), read whole into one record each, with the author and dates their own metadata gives,
and their comments and tracked changes as records of the document's thread.

``read.py`` turns a file into items (what :mod:`mempp.importers.files` calls for a folder);
each format family has a module behind the small protocol of ``common.py``: ``pdf``,
``word`` (.docx), ``slides`` (.pptx), ``sheets`` (.xlsx), ``odf`` (.odt, .ods), ``epub``,
``html``, ``rtf``. Their libraries are the optional extra ``documents``.
"""
