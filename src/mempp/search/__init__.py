"""The read path, as the paper draws it: question → temporal scope → legs → fusion → reserve →
evidence.

``query`` reads a question (terms, phrases, tag labels, the dates it names); ``retrieval``
runs it (``scope_bound``, ``run_legs`` through the store, ``fuse_and_select``, ``to_hits``);
``fusion`` holds the ranking math (weighted RRF, the date leg, thread context) and
``reserve`` the recency slots, all pure functions; ``evidence`` renders the chosen rows as a
dated, attributed block and ``packing`` fits long rows into a budget; ``question_vectors``
holds the vectors of recent questions. Modules here may import the vocabulary (records,
dates, errors, settings, filters, validate), the store protocol (``mempp.store.base``) and
``mempp.threads``; never ``mempp.memory`` (the facade composes them) nor an engine.
"""
