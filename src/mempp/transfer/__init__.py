"""Records leaving a store and coming back: ``export`` writes the human-readable JSON Lines
that ``mempp ingest`` reads. Imports the vocabulary only.
"""
