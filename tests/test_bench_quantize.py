"""benchmarks/bench_quantize.py's graph rewrites: SmoothQuant must leave the float32 product
unchanged and, quantized, must beat plain dynamic int8 on an input with an outlier column (the
case MPNet's FFN inputs are); variant names must be parsed as documented."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("onnx", "onnxruntime")),
    reason="the onnx extra is not installed",
)

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_quantize.py"


@pytest.fixture(scope="module")
def bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_quantize", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_quantize"] = module
    spec.loader.exec_module(module)
    return module


def one_product(weight: np.ndarray) -> Any:
    """x (n x k) @ weight, the weight an initializer named as the encoder graph names it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    k, m = weight.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "l0_up_w"], ["y"])],
        "one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", m])],
        [numpy_helper.from_array(weight, "l0_up_w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def outlier_inputs(rng: np.random.Generator, count: int, k: int) -> list[dict[str, np.ndarray]]:
    feeds = []
    for _ in range(count):
        x = rng.standard_normal((12, k)).astype(np.float32)
        x[:, 3] *= 60.0  # one column far larger than the rest, as in MPNet's FFN input
        feeds.append({"x": x})
    return feeds


def run(model_or_path: Any, feed: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    source = model_or_path if isinstance(model_or_path, str) else model_or_path.SerializeToString()
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    return session.run(["y"], feed)[0]


def test_smoothing_leaves_the_float32_product_unchanged(bench: Any) -> None:
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((64, 48)) * 0.1).astype(np.float32)
    model = one_product(weight)
    feeds = outlier_inputs(rng, 4, 64)
    before = [run(model, feed) for feed in feeds]
    assert bench.name_nodes(model) == {"l0_up": "l0_up"}
    bench.smooth(model, ["l0_up"], feeds, {"l0_up": 0.5})
    assert [node.op_type for node in model.graph.node] == ["Mul", "MatMul"]
    for feed, expected in zip(feeds, before, strict=True):
        np.testing.assert_allclose(run(model, feed), expected, rtol=1e-5, atol=1e-5)


def test_smoothed_int8_beats_plain_int8_on_an_outlier_column(bench: Any, tmp_path: Path) -> None:
    import onnx

    rng = np.random.default_rng(1)
    weight = (rng.standard_normal((64, 48)) * 0.1).astype(np.float32)
    fp32 = tmp_path / "fp32.onnx"
    onnx.save(one_product(weight), str(fp32))
    calibration = outlier_inputs(rng, 8, 64)
    test = outlier_inputs(rng, 4, 64)
    errors = {}
    for variant in ("dyn-rr-up", "dyn-rr-sq5-up"):
        path = bench.build_variant(fp32, variant, tmp_path, 1, calibration)
        # The outlier column's share of the product is exact in both; the error that matters
        # is on the other columns' share, which one per-call scale flattens.
        errors[variant] = max(
            float(np.abs(run(str(path), f) - run(str(fp32), f)).max()) for f in test
        )
    assert errors["dyn-rr-sq5-up"] < errors["dyn-rr-up"] / 2, errors


def test_variant_names(bench: Any) -> None:
    method, spec = bench.variant_spec("dyn-rr-sq5-nodown", 12)
    assert method == "dynamic"
    assert spec["reduce_range"] and spec["smooth"] == 0.5
    assert spec["kinds"] == ("qkv", "out", "up") and spec["per_channel"]
    _, spec = bench.variant_spec("dyn-u8-mid-sq8-down", 12)
    assert spec["weight_type"] == "u8" and spec["skip_layers"] == (0, 11)
    assert spec["smooth"] == 0.8 and spec["kinds"] == ("down",)
    with pytest.raises(SystemExit, match="unknown variant part 'bogus'"):
        bench.variant_spec("dyn-bogus", 12)
