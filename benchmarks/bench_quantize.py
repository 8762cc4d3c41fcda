"""Quantized question encoders against the float32 graph: vector fidelity and speed.

Not a test: run it, read the figures. Each variant is the float32 ONNX graph of
``mpnet-onnx`` (or ``minilm-onnx``) passed through ``onnxruntime.quantization`` with other
options (which MatMuls, per-channel weights, reduced range, weight type, static QDQ
calibrated on real mail), and is measured on real texts that are not benchmark questions
(``../shared/realdata`` mail, cut into question-length snippets):

* fidelity: lowest, 1st-percentile and median cosine to the float32 vector of the same text;
  overlap of the top-50 neighbours of each snippet over a real store's float32 document
  vectors (``--store``, a bench cache's ``store.db-vectors.f32``);
* speed: one snippet at a time, wall and CPU ms (p50 / p95), on 1 and 2 intra-op threads.

    PYTHONPATH=src python benchmarks/bench_quantize.py --encoder mpnet-onnx \
        --store /work/mpnet-cache/locomo-aa4988f991bd4de0/store.db-vectors.f32 \
        --variants fp32 dyn-all dyn-rr --out /tmp/q8/models

The quantized files are written to ``--out`` (one per variant, kept for later runs). A variant
name is a method and options joined by ``-``: ``dyn`` (``quantize_dynamic``) or ``qdq``
(``quantize_static``, QDQ, calibrated on other snippets of the same mail); ``rr`` reduce_range;
``u8`` uint8 weights; ``pt`` per-tensor weights; ``sqN`` SmoothQuant with alpha N/10; which
products: ``all`` (default), ``nodown``, ``ffn``, ``noffn2`` (query/key/value and attention
output only), a kind alone (``qkv``, ``out``, ``up``, ``down``), ``mid`` / ``mid2`` (first and
last one / two layers left float32), ``dlN`` (also the down-projections of layers < N) with
``dN`` (their SmoothQuant alpha N/10). ``docs/encoders.md`` has the figures.
"""

from __future__ import annotations

import argparse
import mailbox
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mempp.encoders import embedder_named

# (MatMul kinds to quantize, layers excluded, quantize_dynamic keyword arguments)
KINDS = ("qkv", "out", "up", "down")


def realdata_root() -> Path:
    here = Path(__file__).resolve().parents[1]
    for candidate in (here.parent / "shared" / "realdata", Path("/work/shared/realdata")):
        if candidate.is_dir():
            return candidate
    raise SystemExit("no realdata folder (../shared/realdata or /work/shared/realdata)")


def snippets(limit: int, *, skip: int = 0) -> list[str]:
    """Question-length pieces (6-40 words) of the bodies of the real mail, in file order,
    deduplicated; ``skip`` drops the first ones (a calibration set disjoint from a test set)."""
    out: list[str] = []
    seen: set[str] = set()
    for path in sorted((realdata_root() / "mail").rglob("*.mbox")):
        for message in mailbox.mbox(str(path)):
            for part in message.walk():
                if part.get_content_type() != "text/plain":
                    continue
                payload = part.get_payload(decode=True)
                if not isinstance(payload, bytes):
                    continue
                text = payload.decode("utf-8", "replace")
                lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(">")]
                for sentence in re.split(r"(?<=[.?!])\s+", " ".join(lines)):
                    words = sentence.split()
                    if 6 <= len(words) <= 40 and sentence not in seen:
                        seen.add(sentence)
                        out.append(" ".join(words))
                        if len(out) >= skip + limit:
                            return out[skip:]
    return out[skip:]


def name_nodes(model: Any) -> dict[str, str]:
    """Give every node a name (the builder leaves them empty); a MatMul whose weight is an
    initializer ``l{i}_{kind}_w`` is named ``l{i}_{kind}``. Returns weight MatMul names."""
    initializers = {t.name for t in model.graph.initializer}
    weighted: dict[str, str] = {}
    for i, node in enumerate(model.graph.node):
        node.name = f"n{i}_{node.op_type}"
        if node.op_type == "MatMul" and node.input[1] in initializers:
            node.name = node.input[1].removesuffix("_w")
            weighted[node.name] = node.name
    return weighted


def variant_spec(variant: str, layers: int) -> tuple[str, dict[str, Any]]:
    """The method ("dynamic" / "static") and its options of a variant name."""
    spec: dict[str, Any] = {"kinds": KINDS, "skip_layers": (), "per_channel": True}
    spec["reduce_range"] = False
    spec["weight_type"] = "s8"
    parts = variant.split("-")
    method = {"dyn": "dynamic", "qdq": "static"}[parts[0]]
    for part in parts[1:]:
        if part == "all":
            pass
        elif part == "rr":
            spec["reduce_range"] = True
        elif part == "u8":
            spec["weight_type"] = "u8"
        elif part == "pt":
            spec["per_channel"] = False
        elif part == "ffn":
            spec["kinds"] = ("up", "down")
        elif part == "nodown":
            spec["kinds"] = ("qkv", "out", "up")
        elif part == "noffn2":  # the FFN up and down in float32: attention products only
            spec["kinds"] = ("qkv", "out")
        elif part in ("qkv", "out", "up", "down"):  # this kind alone
            spec["kinds"] = (part,)
        elif part == "mid":  # the first and last layers stay float32
            spec["skip_layers"] = (0, layers - 1)
        elif part.startswith("d") and part[1:].isdigit():  # SmoothQuant alpha of the down
            spec["down_alpha"] = int(part[1:]) / 10
        elif part.startswith("dl") and part[2:].isdigit():  # the down products of layers < N
            spec["down_layers"] = int(part[2:])
        elif part.startswith("sq"):  # SmoothQuant, alpha in tenths: sq5 = 0.5
            spec["smooth"] = int(part[2:] or 5) / 10
        elif part == "mid2":
            spec["skip_layers"] = (0, 1, layers - 2, layers - 1)
        else:
            raise SystemExit(f"unknown variant part {part!r} in {variant!r}")
    return method, spec


def build_variant(
    fp32_path: Path, variant: str, out: Path, layers: int, calibration: list[Any]
) -> Path:
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    target = out / f"{variant}.onnx"
    if target.is_file():
        return target
    method, spec = variant_spec(variant, layers)
    model = onnx.load(str(fp32_path))
    weighted = name_nodes(model)
    chosen = [
        name
        for name in weighted
        if name.split("_", 1)[1] in spec["kinds"]
        and int(name.split("_", 1)[0][1:]) not in spec["skip_layers"]
    ]
    if "down_layers" in spec:
        chosen += [f"l{i}_down" for i in range(spec["down_layers"]) if f"l{i}_down" in weighted]
        chosen = list(dict.fromkeys(chosen))
    if "smooth" in spec:
        alphas = {
            name: spec.get("down_alpha", spec["smooth"])
            if name.endswith("_down")
            else spec["smooth"]
            for name in chosen
        }
        smooth(model, chosen, calibration, alphas)
    named = out / f".{variant}-named.onnx"
    onnx.save(model, str(named))
    weight_type = QuantType.QUInt8 if spec["weight_type"] == "u8" else QuantType.QInt8
    started = time.perf_counter()
    if method == "dynamic":
        quantize_dynamic(
            named,
            target,
            op_types_to_quantize=["MatMul"],
            per_channel=spec["per_channel"],
            reduce_range=spec["reduce_range"],
            weight_type=weight_type,
            nodes_to_quantize=chosen,
            extra_options={"MatMulConstBOnly": True},
        )
    else:
        feeds = iter(calibration)

        class Reader(CalibrationDataReader):
            def get_next(self) -> dict[str, np.ndarray] | None:
                return next(feeds, None)

        quantize_static(
            named,
            target,
            Reader(),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=["MatMul"],
            per_channel=spec["per_channel"],
            reduce_range=spec["reduce_range"],
            activation_type=QuantType.QUInt8,
            weight_type=weight_type,
            nodes_to_quantize=chosen,
            extra_options={"MatMulConstBOnly": True},
        )
    named.unlink()
    print(f"  built {variant} in {time.perf_counter() - started:.0f} s: {len(chosen)} MatMuls")
    return target


def column_maxima(model: Any, inputs: list[str], feeds: list[Any]) -> dict[str, np.ndarray]:
    """Largest magnitude of each column of each named tensor over the calibration feeds."""
    import onnx
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for name in inputs:
        probe.graph.output.append(
            onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
        )
    runner = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    maxima: dict[str, np.ndarray] = {}
    for feed in feeds:
        for name, value in zip(inputs, runner.run(inputs, feed), strict=True):
            column = np.abs(value.reshape(-1, value.shape[-1])).max(axis=0)
            maxima[name] = np.maximum(maxima.get(name, column), column)
    return maxima


def smooth(model: Any, chosen: list[str], feeds: list[Any], alphas: dict[str, float]) -> None:
    """SmoothQuant: divide each input column j of a chosen MatMul by s_j and multiply row j of
    its weight by s_j (the product is unchanged), s_j = max|x_j|^alpha / max|w_j|^(1-alpha),
    so that a few outlier columns of the activations no longer set the one per-call scale.
    The division is a Mul node in front of the MatMul (its input is also a residual)."""
    from onnx import helper, numpy_helper

    nodes = {node.name: node for node in model.graph.node}
    weights = {t.name: t for t in model.graph.initializer}
    maxima = column_maxima(model, [nodes[name].input[0] for name in chosen], feeds)
    for name in chosen:
        node = nodes[name]
        tensor = weights[node.input[1]]
        weight = numpy_helper.to_array(tensor)
        x_max = np.maximum(maxima[node.input[0]], 1e-5)
        w_max = np.maximum(np.abs(weight).max(axis=1), 1e-5)
        alpha = alphas[name]
        scale = (x_max**alpha / w_max ** (1 - alpha)).astype(np.float32)
        tensor.CopyFrom(
            numpy_helper.from_array((weight * scale[:, None]).astype(np.float32), tensor.name)
        )
        inverse = numpy_helper.from_array((1 / scale).astype(np.float32), name + "_smooth")
        model.graph.initializer.append(inverse)
        divided = name + "_smoothed"
        mul = helper.make_node("Mul", [node.input[0], inverse.name], [divided], name=name + "_sq")
        node.input[0] = divided
        position = list(model.graph.node).index(node)
        model.graph.node.insert(position, mul)


def session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if threads > 1:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


def timed(encode: Callable[[list[str]], np.ndarray], texts: list[str]) -> tuple[float, ...]:
    walls, cpus = [], []
    for text in texts:
        wall, cpu = time.perf_counter(), time.process_time()
        encode([text])
        cpus.append((time.process_time() - cpu) * 1000)
        walls.append((time.perf_counter() - wall) * 1000)
    return (*quantiles(walls), *quantiles(cpus))


def float32_encoder(name: str) -> tuple[Any, Path]:
    """The float32 ONNX encoder and the path of its graph in the model cache (the one its
    load read or wrote, caught from its call of ``cached_session``)."""
    import mempp.encoders.minilm_onnx as minilm_onnx
    import mempp.encoders.mpnet_onnx as mpnet_onnx
    from mempp.encoders.onnx_graph import _cache_file

    module = mpnet_onnx if name == "mpnet-onnx" else minilm_onnx
    original = module.cached_session
    seen: list[Path] = []

    def catching(label: str, weights: Path, variant: str, build: Any, **kw: Any) -> Any:
        made = original(label, weights, variant, build, **kw)
        seen.append(_cache_file(label, weights, variant))
        return made

    module.cached_session = catching  # type: ignore[assignment]
    try:
        embedder = embedder_named(name)
    finally:
        module.cached_session = original  # type: ignore[assignment]
    if not seen or not seen[0].is_file():
        raise SystemExit(f"{name}: its float32 graph is not in the model cache")
    return embedder, seen[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", default="mpnet-onnx", choices=("mpnet-onnx", "minilm-onnx"))
    parser.add_argument("--variants", nargs="+", default=["fp32", "dyn-all"])
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--calibration", type=int, default=120)
    parser.add_argument("--timed", type=int, default=60, help="snippets timed one at a time")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--store", type=Path, default=None, help="float32 document vectors")
    parser.add_argument("--out", type=Path, default=Path("/tmp/q8/models"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    embedder, fp32_path = float32_encoder(args.encoder)
    texts = snippets(args.texts)
    calibration_texts = snippets(args.calibration, skip=args.texts + 200)
    n_short = sum(len(text.split()) <= 20 for text in texts)
    print(
        f"{len(texts)} snippets ({n_short} of <= 20 words), {len(calibration_texts)} to calibrate"
    )
    layers = 12 if args.encoder == "mpnet-onnx" else 6
    reference_session = embedder._session
    feeds: list[Any] = []
    original_run = reference_session.run

    class Recorder:
        def run(self, names: Any, feed: dict[str, np.ndarray]) -> Any:
            feeds.append(feed)
            return original_run(names, feed)

    embedder._session = Recorder()
    for text in calibration_texts:
        embedder.embed([text])
    embedder._session = reference_session
    reference = embedder.embed(texts)
    # Timed one at a time: the question-length snippets (a search's question is 10-20 words).
    short = [text for text in texts if len(text.split()) <= 20]
    store = None
    if args.store is not None:
        store = np.fromfile(args.store, dtype=np.float32).reshape(-1, embedder.dim)
        reference_top = np.argsort(-(reference @ store.T), axis=1)[:, :50]
    print(
        "variant | cos min / p1 / median | top-50 overlap min / mean | "
        + " | ".join(f"{t} thr wall p50/p95, cpu p50/p95 ms" for t in args.threads)
    )
    for variant in args.variants:
        path = fp32_path if variant == "fp32" else None
        if path is None:
            path = build_variant(fp32_path, variant, args.out, layers, feeds)
        embedder._session = session(path, 1)
        vectors = embedder.embed(texts)
        cosines = np.sum(vectors * reference, axis=1)
        row = (
            f"{variant} | {cosines.min():.4f} / {np.percentile(cosines, 1):.4f} / "
            f"{np.median(cosines):.4f}"
        )
        if store is not None:
            top = np.argsort(-(vectors @ store.T), axis=1)[:, :50]
            overlap = [len(set(a) & set(b)) / 50 for a, b in zip(top, reference_top, strict=True)]
            row += f" | {min(overlap):.2f} / {np.mean(overlap):.3f}"
        for threads in args.threads:
            embedder._session = session(path, threads)
            timed(embedder.embed, short[:5])  # warm
            wall50, wall95, cpu50, cpu95 = timed(embedder.embed, short[: args.timed])
            row += f" | {wall50:.1f}/{wall95:.1f}, {cpu50:.1f}/{cpu95:.1f}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
