"""Records leaving a store and coming back: ``export`` writes the human-readable JSON Lines
that ``mempp ingest`` reads as new records; ``dump`` and ``restore`` move a lossless,
checksummed snapshot into an empty store of either engine, id for id (through the store's
``SnapshotStore`` protocol, never through ``mempp.memory``).
"""
