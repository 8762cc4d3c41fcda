"""The array file beside the database (``mempp.index.array_file``): arrays come back exactly, and
a file that is truncated, damaged or not one is refused with its name, never misread."""

from __future__ import annotations

import os
import re

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


def test_a_mapped_read_gives_the_same_arrays_writable_without_touching_the_file(
    tmp_path,
) -> None:
    path = tmp_path / "x.arrays"
    arrays = _arrays()
    array_file.write(path, {"kind": "test"}, arrays, pad_rows=7)
    whole = path.read_bytes()
    meta, back = array_file.read(path, mapped=True)
    assert meta == {"kind": "test"} and list(back) == list(arrays)
    for name, array in arrays.items():
        got = back[name]
        assert got.dtype == array.dtype and got.shape == (len(array) + 7, *array.shape[1:])
        assert np.array_equal(got[: len(array)], array) and not got[len(array) :].any()
        assert got.flags.writeable
    back["codes"][:] = 5  # copy-on-write: the process's pages, never the file's
    back["ids"][1003] = 9
    assert path.read_bytes() == whole
    assert np.array_equal(array_file.read(path)[1]["codes"][:1000], arrays["codes"])
    # A plain read of a padded file sees the zero rows too, and the same checksums pass.
    plain = array_file.read(path)[1]
    assert all(np.array_equal(plain[n], array_file.read(path, mapped=True)[1][n]) for n in plain)
    with pytest.raises(ValueError, match="pad_rows"):
        array_file.read(path, spare=lambda rows: 1, mapped=True)


def test_a_newer_file_renamed_over_a_mapped_one_leaves_the_map_as_it_was(tmp_path) -> None:
    path = tmp_path / "x.arrays"
    arrays = _arrays()
    array_file.write(path, {"kind": "old"}, arrays)
    _, mapped = array_file.read(path, mapped=True)
    array_file.write(path, {"kind": "new"}, {"codes": np.ones((3, 24), dtype=np.int8)})
    assert np.array_equal(mapped["codes"], arrays["codes"])
    assert array_file.read(path, mapped=True)[0] == {"kind": "new"}


def test_mapped_reads_refuse_what_plain_reads_refuse(tmp_path) -> None:
    path = tmp_path / "x.arrays"
    array_file.write(path, {"kind": "test"}, _arrays(), pad_rows=3)
    whole = path.read_bytes()
    cases = [whole[:-1], whole + b"\0", whole[:20]]
    for at in (len(whole) - 1, len(whole) // 2):  # in the padding, in an array
        flipped = bytearray(whole)
        flipped[at] ^= 0x01
        cases.append(bytes(flipped))
    for content in cases:
        path.write_bytes(content)
        with pytest.raises(ValueError, match=str(path)):
            array_file.read(path, mapped=True)


def _resident_kib(path) -> int:
    """Resident KiB of this process's maps of ``path`` (Linux ``/proc/self/smaps``: a line
    ``start-end perms offset dev inode [path]`` opens each map, its ``Rss:`` line follows)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as maps:
        for line in maps:
            fields = line.split()
            if re.fullmatch(r"[0-9a-f]+-[0-9a-f]+", fields[0]):
                inside = len(fields) >= 6 and fields[5] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


def test_a_lazy_read_checks_everything_then_keeps_no_page_resident(tmp_path) -> None:
    if not os.path.exists("/proc/self/smaps"):
        pytest.skip("resident pages per map are read from Linux's /proc/self/smaps")
    path = tmp_path / "big.arrays"
    big = np.random.default_rng(2).integers(0, 255, 32 << 20, dtype=np.uint8)
    array_file.write(path, {"kind": "test"}, {"big": big, "ids": np.arange(9)})
    seen = []

    def check(meta, arrays) -> None:
        seen.append(int(arrays["big"][-1]))  # the arrays are whole and checked by then

    _, eager = array_file.read(path, mapped=True)
    assert _resident_kib(path) > 30_000  # the checksums read all 32 MiB
    del eager
    _, lazy = array_file.read(path, mapped=True, lazy=True, check=check)
    assert seen == [int(big[-1])]
    assert _resident_kib(path) < 1_024
    assert np.array_equal(lazy["big"], big)  # paged in again from the file on use
    lazy["ids"][0] = 7  # still copy-on-write
    assert array_file.read(path)[1]["ids"][0] == 0
    # The caller's check refuses like the file's own checks, naming the file.
    with pytest.raises(ValueError, match=r"big\.arrays: ids are off"):
        array_file.read(path, mapped=True, lazy=True, check=_refuse)
    with pytest.raises(ValueError, match="lazy is for a mapped file"):
        array_file.read(path, lazy=True)
    flipped = bytearray(path.read_bytes())
    flipped[-1] ^= 1
    path.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match=r"big\.arrays: array 'ids' fails its checksum"):
        array_file.read(path, mapped=True, lazy=True)


def _refuse(meta, arrays) -> None:
    raise ValueError("ids are off")
