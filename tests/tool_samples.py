"""Where the real tool exports are (``<repo>/../shared/realdata/sources/TOOL/...``, else
``/work/shared/realdata``), for the importer tests; a test skips when they are absent."""

from __future__ import annotations

from pathlib import Path

import pytest

_ROOTS = (
    Path(__file__).resolve().parents[1].parent / "shared" / "realdata",
    Path("/work/shared/realdata"),
)


def sample(*parts: str) -> Path:
    """The real sample at ``sources/PARTS...``, or a clean skip."""
    for root in _ROOTS:
        found = root.joinpath("sources", *parts)
        if found.exists():
            return found
    pytest.skip(f"real sample sources/{'/'.join(parts)} is not on this machine")
