"""mempp.bench.compare: two runs paired by question, per category, with paired intervals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mempp.bench import compare
from mempp.errors import InvalidInput


def _run(name: str, windows: dict[str, float], system: str = "mempp-default") -> dict:
    return {
        "benchmark": {"name": name},
        "categories": {"C1": "first", "C2": "second"},
        "questions": [
            {
                "question": q,
                "category": "C1" if q < "q3" else "C2",
                "system": system,
                "window": w,
                "recall@10": w / 2,
            }
            for q, w in windows.items()
        ],
    }


def test_differences_are_paired_by_question_and_split_by_category() -> None:
    base = _run("orgmembench", {"q1": 0.0, "q2": 1.0, "q3": 0.5, "q4": 0.5})
    # q5 exists only in the other run: left out of every figure, and counted.
    other = _run("orgmembench", {"q2": 1.0, "q1": 1.0, "q3": 0.5, "q4": 0.0, "q5": 1.0})
    result = compare.compare(base, other, metrics=["window", "recall@10"], resamples=200)
    assert result["questions"] == 4 and result["unpaired"] == 1
    window = result["overall"]["window"]
    assert window["base"]["mean"] == pytest.approx(0.5)
    assert window["other"]["mean"] == pytest.approx(0.625)
    assert window["delta"]["mean"] == pytest.approx(0.125)
    assert window["delta"]["lo"] <= 0.125 <= window["delta"]["hi"]
    c1, c2 = result["by_category"]["C1"], result["by_category"]["C2"]
    assert c1["n"] == 2 and c1["window"]["delta"]["mean"] == pytest.approx(0.5)
    assert c2["window"]["delta"]["mean"] == pytest.approx(-0.25)
    # A question whose score is the same in both runs adds a zero difference: every
    # resample of a run compared with itself gives exactly 0.
    same = compare.compare(base, base, metrics=["window"], resamples=200)
    assert same["overall"]["window"]["delta"] == {"mean": 0.0, "lo": 0.0, "hi": 0.0, "n": 4}
    text = compare.markdown(result, ["window", "recall@10"], "minilm", "mpnet")
    assert "| overall | 4 | window | 50.0 | 62.5 | +12.5 [" in text
    assert "| C2 | 2 | recall@10 | 25.0 | 12.5 | -12.5 [" in text
    assert "1 in one run only" in text


def test_other_system_and_bad_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _run("locomo", {"q1": 1.0, "q2": 0.0})
    other = _run("locomo", {"q1": 0.0, "q2": 0.0}, system="bm25")
    result = compare.compare(base, other, other_system="bm25", metrics=["window"], resamples=50)
    assert result["overall"]["window"]["delta"]["mean"] == pytest.approx(-0.5)
    with pytest.raises(InvalidInput, match=r"no rows of system 'mempp-default'.*bm25"):
        compare.compare(base, other)
    with pytest.raises(InvalidInput, match="different benchmarks: locomo and orgmembench"):
        compare.compare(base, _run("orgmembench", {"q1": 1.0}))
    with pytest.raises(InvalidInput, match="share no question"):
        compare.compare(base, _run("locomo", {"q9": 1.0}))

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "results.json").write_text(json.dumps(base), "utf-8")
    (tmp_path / "b.json").write_text(json.dumps(other), "utf-8")
    (tmp_path / "bad.json").write_text("{", "utf-8")
    argv = [str(tmp_path / "a"), str(tmp_path / "b.json"), "--other-system", "bm25"]
    assert compare.main([*argv, "--metrics", "window", "--resamples", "50"]) == 0
    assert "| overall | 2 | window | 50.0 | 0.0 | -50.0 [" in capsys.readouterr().out
    for path, message in (("bad.json", "not JSON"), ("none.json", "cannot read")):
        assert compare.main([str(tmp_path / "a"), str(tmp_path / path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and message in err and path in err
