"""The array file beside the database (``mempp.index.array_file``): arrays come back exactly, and
a file that is truncated, damaged or not one is refused with its name, never misread."""

from __future__ import annotations

import numpy as np
import pytest

from mempp.index import array_file


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {
        "ids": np.arange(1, 1001, dtype=np.int64),
        "codes": rng.integers(-127, 128, (1000, 24)).astype(np.int8),
        "flags": rng.random(1000) < 0.5,
        "empty": np.empty(0, dtype=np.float32),
        "scales": rng.random(1000).astype(np.float32),
    }


def test_arrays_and_meta_come_back_exactly_with_spare_rows(tmp_path) -> None:
    path = tmp_path / "x.arrays"
    arrays = _arrays()
    array_file.write(path, {"kind": "test", "names": ["a", "é"]}, arrays)
    meta, back = array_file.read(path)
    assert meta == {"kind": "test", "names": ["a", "é"]}
    assert list(back) == list(arrays)
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and np.array_equal(back[name], array)
        assert back[name].flags.writeable
    _, padded = array_file.read(path, spare=lambda rows: rows // 2)
    assert padded["codes"].shape == (1500, 24) and np.array_equal(
        padded["codes"][:1000], arrays["codes"]
    )
    assert not list(tmp_path.glob("*.partial"))
    array_file.write(path, {"kind": "again"}, {"ids": arrays["ids"][:3]})  # replaced whole
    assert array_file.read(path)[0] == {"kind": "again"}


def test_truncated_damaged_or_foreign_files_are_refused(tmp_path) -> None:
    path = tmp_path / "x.arrays"
    array_file.write(path, {"kind": "test"}, _arrays())
    whole = path.read_bytes()
    cases = {
        "truncated": whole[:-1],
        "cut in the header": whole[:20],
        "grown": whole + b"\0",
        "foreign": b"PK\x03\x04" + whole[4:],
        "empty": b"",
    }
    # The last array, one in the middle, and the caller's meta in the header.
    for at in (len(whole) - 1, len(whole) // 2, whole.index(b'"test"') + 2):
        flipped = bytearray(whole)
        flipped[at] ^= 0x01
        cases[f"bit flip at {at}"] = bytes(flipped)
    for content in cases.values():
        path.write_bytes(content)
        with pytest.raises(ValueError, match=str(path)):
            array_file.read(path)
    with pytest.raises(ValueError, match=r"missing\.arrays"):
        array_file.read(tmp_path / "missing.arrays")
