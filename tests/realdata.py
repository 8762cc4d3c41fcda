"""Where the shared real import samples are (never copied into the project): beside the
repository as ``../shared/realdata``, else ``/work/shared/realdata``; a test skips cleanly
when neither holds the sample it reads."""

from __future__ import annotations

from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[1]
_PLACES = (_REPO.parent / "shared" / "realdata", Path("/work/shared/realdata"))


def sample(relative: str) -> Path:
    """The real sample at ``relative`` under realdata, or a skip naming it."""
    for root in _PLACES:
        if (root / relative).exists():
            return root / relative
    pytest.skip(f"real sample {relative} not present")
    raise AssertionError  # unreachable: skip raises
