"""Where work runs: BLAS held to the calling thread for a search's small products
(``blas``), and a fresh thread for work that goes on beside the caller (``background``: the
question's encoding beside the legs that need no vector). Imports nothing of mempp.
"""
