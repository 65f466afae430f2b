"""The smallest BERT folder `qkv embed` loads, written with NumPy alone (no
torch, nothing downloaded): 1 layer, 1 head, hidden size 4, the three-token
vocabulary of a tokenizer.json ([UNK], [CLS], [SEP]), random F32 weights;
whole or in two shards with an index, for the tests of how a folder is read."""
import json
import struct

import numpy as np

TOKENIZER = {
    "added_tokens": [], "normalizer": {"type": "BertNormalizer"}, "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2}},
}
CONFIG = {"model_type": "bert", "vocab_size": 3, "hidden_size": 4, "num_hidden_layers": 1,
          "num_attention_heads": 1, "intermediate_size": 4, "max_position_embeddings": 8,
          "type_vocab_size": 1}
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


def tensors():
    """BertModel's tensors, by name: [out, in] matrices, LayerNorms of ones."""
    rng = np.random.default_rng(0)
    shapes = {"embeddings.word_embeddings.weight": (3, 4), "embeddings.position_embeddings.weight": (8, 4),
              "embeddings.token_type_embeddings.weight": (1, 4)}
    for name in ("attention.self.query", "attention.self.key", "attention.self.value",
                 "attention.output.dense", "intermediate.dense", "output.dense"):
        shapes[f"encoder.layer.0.{name}.weight"] = (4, 4)
        shapes[f"encoder.layer.0.{name}.bias"] = (4,)
    out = {name: rng.normal(0, 0.5, size=shape).astype("<f4") for name, shape in shapes.items()}
    for norm in ("embeddings.LayerNorm", "encoder.layer.0.attention.output.LayerNorm",
                 "encoder.layer.0.output.LayerNorm"):
        out[norm + ".weight"], out[norm + ".bias"] = np.ones(4, "<f4"), np.zeros(4, "<f4")
    return out


def safetensors(named):
    """The bytes of a .safetensors file holding `named` (name -> float32 array)."""
    header, data = {}, b""
    for name, a in named.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [len(data), len(data) + a.nbytes]}
        data += a.tobytes()
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def bert_folder(path, second=None, index=None):
    """Writes the folder at `path`. With `second` (tensor names), the weights
    are two shards, those tensors in the second, and an index that maps each
    tensor to its shard, then updated with `index` (name -> file name)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(CONFIG))
    (path / "tokenizer.json").write_text(json.dumps(TOKENIZER))
    named = tensors()
    if second is None:
        (path / "model.safetensors").write_bytes(safetensors(named))
        return path
    parts = [{n: a for n, a in named.items() if n not in second}, {n: a for n, a in named.items() if n in second}]
    for name, part in zip(SHARDS, parts):
        (path / name).write_bytes(safetensors(part))
    weight_map = {n: SHARDS[n in second] for n in named}
    weight_map.update(index or {})
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return path
