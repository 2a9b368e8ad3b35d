#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpus, fuzz/corpus/<target>/, from what the tests send.

The bodies are those of tests/api/malformed.rs, tests/api/arrays.rs, tests/api/admin.rs and
tests/api/text_serving.rs (rebuilt here for the bundled digits model, 64 values a row, and for
a text model named by its input `text`), config/example-request.json, the bundled
config/models/digits/1/model.safetensors, the messages of tests/python/fake_trainer.py and a
synthetic encoder folder as models/src/encoder/synthetic/mod.rs writes one. Standard library
only; deterministic, so rerunning it changes no file. Run from anywhere:

    python3 fuzz/seeds.py
"""

import gzip
import hashlib
import json
import random
import struct
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
W = 64  # the digits model's input width
ROW = [float(i % 17) for i in range(W)]


def dumps(value, compact=False):
    if compact:
        return json.dumps(value, separators=(",", ":")).encode()
    return json.dumps(value).encode()


def write(target, items):
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for data in items:
        name = hashlib.sha1(data).hexdigest()[:16]
        (folder / name).write_bytes(data)
    return len(items)


def tensor(datatype, shape, data, name="input-0"):
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


def request(*inputs, **extra):
    body = {"inputs": list(inputs)}
    body.update(extra)
    return body


def infer_json():
    ok = [ROW]
    bodies = [
        (ROOT / "config" / "example-request.json").read_bytes(),
        b"this is not json",
        b"",
        dumps([1, 2]),
        dumps({"id": "x"}),
        dumps({"inputs": []}),
        dumps(request(tensor("FP32", [1, W], ok, name="x"))),
        dumps(request(tensor("FP32", [1, W], ok), tensor("FP32", [1, W], ok, name="input-1"))),
        dumps(request(tensor("FP8", [1, W], ok))),
        dumps(request(tensor("FP32", [W], ok))),
        dumps(request(tensor("FP32", [0, W], []))),
        dumps(request(tensor("FP32", [-1, W], ok))),
        dumps(request(tensor("FP32", [2**63 - 1, W], ok))),
        dumps(request(tensor("FP32", [2, W], ok))),
        dumps(request(tensor("INT8", [1, W], [300] * W))),
        dumps(request(tensor("INT32", [1, W], [1, 1.5] + [1] * (W - 2)))),
        dumps(request(tensor("UINT8", [1, W], [-1] * W))),
        dumps(request(tensor("BOOL", [1, W], [True, False] * (W // 2)))),
        dumps(request(tensor("FP32", [1, W], [1e39] * W))),
        dumps(request(tensor("INT32", [1, W], [16777217] * W))),
        dumps(request(tensor("FP16", [2, W], [ROW, ROW]))),
        dumps(request(tensor("FP32", [1, W], [1.0] * 500))),
        dumps({"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, W], "data": ok,
                           "parameters": {"binary_data_size": 48}}]}),
        dumps({"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, W]}]}),
        dumps(request(tensor("FP32", [1, W], ok), outputs=[{"name": "logits"}])),
        dumps(request(tensor("FP32", [1, W], ok),
                      outputs=[{"name": "output-0", "parameters": {"binary_data": True}}])),
        dumps(request(tensor("FP32", [1, W], ok), parameters={"priority": 99, "timeout": 5000})),
        dumps(request(tensor("FP32", [1, W], ok), parameters={"priority": "high"})),
        dumps(request(tensor("FP32", [1, W], ok), id="r1",
                      parameters={"priority": 2, "binary_data_output": True, "custom": [1]})),
        b'{"inputs": [], "extra": 1}',
        b'{"inputs": []} xyz',
        # data before shape, nested rows, the raw number shapes of malformed.rs
        b'{"inputs":[{"data":[[' + b",".join(b"%d" % (i % 10) for i in range(W)) +
        b']],"name":"input-0","datatype":"FP64","shape":[1,64]}]}',
        b'{"inputs":[{"name":"input-0","datatype":"INT64","shape":[1,64],"data":[-9223372036854775809'
        + b",1" * (W - 1) + b"]}]}",
        b'{"inputs":[{"name":"input-0","datatype":"UINT64","shape":[1,64],"data":[18446744073709551616'
        + b",1" * (W - 1) + b"]}]}",
        b'{"inputs":[{"name":"input-0","datatype":"INT64","shape":[1,64],"data":[9007199254740993'
        + b",1" * (W - 1) + b"]}]}",
        b'{"inputs":[{"name":"input-0","datatype":"FP32","shape":[1,64],"data":[1e400'
        + b",1" * (W - 1) + b"]}]}",
        b'{"inputs":[{"name":"input-0","datatype":"FP32","shape":[1,64],"data":[1.' + b",1" * (W - 1)
        + b"]}]}",
        b'{"inputs":[{"name":"input-0","datatype":"FP32","shape":[1,64],"data":' + b"[" * 200 + b"1"
        + b"]" * 200 + b"}]}",
        b'{"inputs":[{"name":"input-0","datatype":"FP32","shape":[1,64],"data":[0.1234567890123456789e-5,'
        b'-1.5E+3,2e-308,1.7976931348623157e308,-0.0,"\\u00e9\\ud83d\\ude00",null]}]}',
        # tests/api/arrays.rs: objects given as arrays
        dumps([]),
        dumps([None, [tensor("FP32", [1, W], ROW)]]),
        dumps({"inputs": [["input-0", "FP32", [1, W], {}, ROW]]}),
        dumps(request(tensor("FP32", [1, W], ok), outputs=[["output-0"]])),
        dumps(request(tensor("FP32", [1, W], ok), parameters=[])),
        # text models: tests/api/text_serving.rs
        dumps(request(tensor("BYTES", [2], ["a man is eating food .", "the cat runs"], name="text"))),
        dumps(request(tensor("BYTES", [3, 1], [["a man is eating food ."], ["the cat runs"], ["one"]],
                             name="text"), parameters={"normalize": False})),
        dumps(request(tensor("BYTES", [2], [1, 2], name="text"))),
        dumps(request(tensor("BYTES", [2, 2], ["a", "b", "c", "d"], name="text"))),
        dumps(request(tensor("FP32", [1], [1.0], name="text"))),
        dumps(request(tensor("BYTES", [1], [" ".join(["word"] * 80)], name="text"),
                      parameters={"truncate": False})),
        dumps(request(tensor("BYTES", [1], ["Ünïcödé ÄÖÜ 中文字符 😀 \u0000 \t tab"], name="text"))),
        dumps(request(tensor("BYTES", [1], [""], name="text"))),
    ]
    return write("infer_json", bodies)


def binary_body(header, binary, header_len=None):
    h = dumps(header)
    n = len(h) if header_len is None else header_len
    return struct.pack("<H", n) + h + binary


def f32s(values):
    return b"".join(struct.pack("<f", v) for v in values)


def bytes_elements(texts):
    return b"".join(struct.pack("<I", len(t)) + t for t in texts)


def binary_tensor(datatype, shape, size, name="input-0"):
    return {"name": name, "datatype": datatype, "shape": shape,
            "parameters": {"binary_data_size": size}}


def infer_binary():
    row = f32s(ROW)
    nan_row = f32s(ROW[:3] + [float("nan")] + ROW[4:])
    texts = [b"a man is eating food .", b"the cat runs", "café 中文".encode()]
    bodies = [
        binary_body(request(binary_tensor("FP32", [1, W], W * 4)), row),
        binary_body(request(binary_tensor("FP32", [1, W], W * 4),
                            outputs=[{"name": "output-0", "parameters": {"binary_data": True}}]), row),
        binary_body(request(binary_tensor("FP32", [1, W], W * 4)), nan_row),
        binary_body(request(binary_tensor("FP32", [1, W], W * 4)), row[:24]),
        binary_body(request(binary_tensor("FP32", [1, W], W * 4 - 4)), row[:-4]),
        binary_body(request(binary_tensor("FP32", [1, W], W * 4)), row, header_len=60000),
        binary_body(request(binary_tensor("FP32", [1, W], W * 4)), row, header_len=20),
        binary_body(request(binary_tensor("FP32", [1, W], W * 4)), row + b"\0" * 8),
        binary_body(request(binary_tensor("INT64", [1, W], W * 8)),
                    struct.pack("<q", 2**63 - 1) + struct.pack("<q", 1) * (W - 1)),
        binary_body(request(binary_tensor("UINT64", [1, W], W * 8)),
                    struct.pack("<Q", 2**64 - 1) + struct.pack("<Q", 1) * (W - 1)),
        binary_body(request(binary_tensor("FP16", [1, W], W * 2)), b"\x00\x3c" * W),
        binary_body(request(binary_tensor("BF16", [1, W], W * 2)), b"\x80\x3f" * W),
        binary_body(request(binary_tensor("INT8", [1, W], W)), bytes(range(W))),
        binary_body(request(binary_tensor("BOOL", [1, W], W)), b"\x01\x00" * (W // 2)),
        binary_body(request(binary_tensor("FP64", [1, W], W * 8)),
                    b"".join(struct.pack("<d", v) for v in ROW)),
        binary_body(request(binary_tensor("BYTES", [3], len(bytes_elements(texts)), name="text")),
                    bytes_elements(texts)),
        binary_body(request(binary_tensor("BYTES", [1, 1], 5, name="text")), b"\x05\0\0\0a"),
        binary_body(request(binary_tensor("BYTES", [1], 5, name="text")), b"\x01\0\0\0\xe9"),
        binary_body(request(binary_tensor("BYTES", [2], 6, name="text")), b"\x01\0\0\0a\0"),
    ]
    return write("infer_binary", bodies)


def gzip_of(data):
    return gzip.compress(data, mtime=0)


def content_coding():
    example = (ROOT / "config" / "example-request.json").read_bytes()
    empty_member = gzip_of(b"")
    rng = random.Random(7)
    noise = bytes(rng.getrandbits(8) for _ in range(70 << 10))
    gz, df = 0, 1  # mode bit 0; bits 1-2 pick the limit: 1 KiB, 16 KiB, 64 KiB, 1 MiB
    lim = lambda i: i << 1  # noqa: E731
    bodies = [
        bytes([gz | lim(2)]) + gzip_of(example),
        bytes([df | lim(2)]) + zlib.compress(example),
        bytes([gz | lim(0)]) + gzip_of(example),
        bytes([gz | lim(3)]) + gzip_of(example) + gzip_of(b'{"inputs": []}'),
        bytes([gz | lim(2)]) + empty_member * 80 + gzip_of(example),
        bytes([gz | lim(2)]) + example,
        bytes([df | lim(2)]) + zlib.compress(example)[:40],
        bytes([df | lim(1)]) + zlib.compress(b" " * (1 << 20), 9),
        bytes([gz | lim(2)]) + gzip_of(b"\0" * (200 << 10)),
        bytes([df | lim(2)]) + zlib.compress(example) + b"trailing",
        bytes([df | lim(2)]) + bytes([0x78, 0x01]) + b"\x00\x00\x00\xff\xff" * 100,
        bytes([gz | lim(3)]) + gzip_of(noise),
        bytes([df | lim(3)]) + zlib.compress(noise, 0)[: 66 << 10],
    ]
    return write("content_coding", bodies)


def admin_json():
    bodies = [dumps(b) for b in [
        {"p99_ms": 10, "max_batch_size": 4},
        {"policy": "static", "max_queue_delay_us": 200},
        {"policy": "fastest"},
        {"p99_ms": 12.5, "max_batch_size": 4, "policy": "static"},
        {"queue_capacity": 4611686018427387904},
        {"max_queue_delay_us": 18446744073709551615},
        {"p99_ms": 5e-324},
        {"max_batch_size": 0},
        {"queue_capacity": 1, "p99_ms": 1e300},
        {"replicas": 2},
        ["static", 10.0, 8, 100, 16],
        [None, None, None, None, None],
        [["static", 10.0]],
        {"filter": "info"},
        {"filter": "info,gateway=debug,hyper=warn"},
        {"filter": "[infer{model=digits}]=trace"},
        {"filter": "gateway::http[request{path=\"/v2\"}]=debug,off"},
        {"filter": "=="},
        {"filter": "a[b{c=/d.*e/}]=f"},
        ["info"],
        [["debug"]],
        [],
    ]]
    return write("admin_json", bodies)


def embeddings_json():
    long = " ".join(["word"] * 100)
    bodies = [dumps(b) for b in [
        {"model": "enc", "input": ["a man is eating food .", "the cat runs"]},
        {"model": "enc", "input": "one"},
        {"model": "enc", "input": "a cat", "encoding_format": "base64", "user": "u"},
        {"model": "enc", "input": "a", "dimensions": 8},
        {"model": "enc", "input": [1, 2, 3]},
        {"model": "enc", "input": []},
        {"model": "enc", "input": [""]},
        {"model": "enc", "input": "a", "encoding_format": "hex"},
        {"model": "enc", "input": long},
        {"inputs": ["a man is eating food .", "the cat runs"], "model": "enc"},
        {"inputs": long},
        {"inputs": long, "truncate": True},
        {"inputs": "Ünïcödé 中文 😀", "normalize": False},
        {"inputs": [["nested"]]},
        {"inputs": "x", "other": 1},
        {"model": "enc", "input": [[2, 5, 3], [2, 3]]},
        {"inputs": ["a cat", [2, 7, 3]], "truncate": False},
        {"inputs": [2] + [5] * 60 + [3], "truncate": True},
        {"model": "enc", "input": [[2, 99999], [-1], [4294967296]]},
        {"inputs": "a cat runs", "raw_scores": True},
        {"inputs": ["a man is eating", "the dog runs"]},
        {"inputs": [["a", "b"], "c", ["", "d"]], "parameters": {"top_k": 1}},
        {"inputs": [long, long], "truncate": True},
        {"query": "a man is eating", "texts": ["food", "the cat runs", long], "return_text": True},
        {"query": long, "texts": [long], "truncate": True},
        {"query": "", "texts": []},
        {"inputs": ["a"] * 2100},
        {"query": "q", "texts": ["a"] * 2100, "model": "enc"},
        # Cohere's embed and rerank.
        {"texts": ["a man is eating", long], "input_type": "search_query",
         "embedding_types": ["float", "binary", "ubinary", "base64"], "truncate": "START"},
        {"texts": [long], "truncate": "NONE", "embedding_types": ["int8"]},
        {"texts": [""], "embedding_types": [], "truncate": "MIDDLE"},
        {"texts": ["a"] * 2100, "max_tokens": 8, "output_dimension": 3},
        {"query": "a man", "documents": ["food", {"text": "the cat runs"}, long], "top_n": 2,
         "return_documents": True},
        {"query": long, "documents": [{"title": "no text"}, ""]},
    ]]
    return write("embeddings_json", bodies)


def coloc_line():
    lines = [
        {"type": "hello", "version": 1, "name": "fake-well-behaved", "pid": 4242,
         "device": "cpu", "max_streams": 2, "memory_bytes": 1024},
        {"type": "ack", "seq": 3, "streams": 1, "memory_bytes": 0},
        {"type": "report", "step": 1, "samples_per_second": 1.0, "loss": 1.0},
        {"type": "report", "step": 7, "samples_per_second": 1e308, "loss": -0.0, "accuracy": 0.5},
        {"type": "hello", "version": 2, "name": "x", "pid": -1, "device": "cuda:0",
         "max_streams": 4294967295, "memory_bytes": 18446744073709551615, "extra": "ignored"},
        {"type": "launch"},
        {"type": "welcome", "version": 1, "trainer_id": "t0-1", "heartbeat_ms": 500},
        {"type": "directive", "seq": 3, "allowance": 0.5, "max_streams": 1,
         "memory_limit_bytes": 10, "duty_cycle": 0.5, "pause": False, "ack_within_ms": 200,
         "reason": "budget pressure"},
    ]
    encoded = [dumps(l, compact=True) + b"\n" for l in lines]
    bodies = [bytes([c]) + l for c, l in zip([63, 0, 7, 15, 31, 3, 63, 1], encoded)]
    bodies.append(bytes([5]) + b"".join(encoded[:4]))
    bodies.append(bytes([63]) + b"not json\n\xff\xfe\n" + encoded[2])
    bodies.append(bytes([2]) + encoded[0][:-1])
    return write("coloc_line", bodies)


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)] -> the file."""
    header, offset, data = {}, 0, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    h = dumps(header, compact=True)
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def values(n, dtype, scale=0.1, seed=1):
    rng = random.Random(seed)
    vs = [rng.uniform(-scale, scale) for _ in range(n)]
    if dtype == "F32":
        return b"".join(struct.pack("<f", v) for v in vs)
    if dtype == "F16":
        return b"".join(struct.pack("<e", v) for v in vs)
    # BF16: the high half of the f32
    return b"".join(struct.pack("<f", v)[2:] for v in vs)


def checkpoint():
    digits = (ROOT / "config" / "models" / "digits" / "1" / "model.safetensors").read_bytes()
    def mlp(dims, dtype, names=("weight", "bias")):
        tensors = []
        for i, (n_in, n_out) in enumerate(zip(dims, dims[1:])):
            tensors.append((f"layers.{i}.{names[0]}", dtype, [n_out, n_in], values(n_in * n_out, dtype)))
            tensors.append((f"layers.{i}.{names[1]}", dtype, [n_out], values(n_out, dtype)))
        return tensors
    bodies = [
        digits,
        safetensors(mlp([4, 3, 2], "F32")),
        safetensors(mlp([4, 3], "F16"), metadata={"format": "pt"}),
        safetensors(mlp([4, 3], "BF16")),
        safetensors(mlp([4, 3], "F32")[:1]),
        safetensors(mlp([4, 3, 2], "F32")[2:]),
        safetensors([("layers.0.weight", "F32", [3], values(3, "F32")),
                     ("layers.0.bias", "F32", [3], values(3, "F32"))]),
        safetensors([("layers.0.weight", "I64", [1, 1], b"\0" * 8),
                     ("layers.0.bias", "F32", [1], b"\0\0\x80\x7f")]),
        safetensors([("other", "F32", [1], b"\0" * 4)]),
        safetensors([]),
        b"\x08\0\0\0\0\0\0\0{}      ",
    ]
    return write("checkpoint", bodies)


# models/src/encoder/synthetic/mod.rs, default spec (max_seq_length 48)
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ("a the man woman is are was eating eat food bread piece of and in on to with for it "
         "this that cat dog runs run fast slow big small red blue green one two three . , ! ? ' - "
         "( ) 0 1 2 3 4 5 6 7 8 9 b c d e f g h i j k l m n o p q r s t u v w x y z").split()
PIECES = ("##s ##ing ##ed ##er ##ly ##a ##b ##c ##d ##e ##f ##g ##h ##i ##j ##k ##l ##m ##n ##o "
          "##p ##q ##r ##s ##t ##u ##v ##w ##x ##y ##z ##0 ##1 ##2 ##3 ##4 ##5 ##6 ##7 ##8 ##9").split()


def vocabulary():
    seen, out = set(), []
    for t in SPECIALS + WORDS + PIECES:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def bert_config(**over):
    c = {"architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
         "hidden_size": 32, "intermediate_size": 64, "layer_norm_eps": 1e-12,
         "max_position_embeddings": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
         "pad_token_id": 0, "position_embedding_type": "absolute", "type_vocab_size": 2,
         "vocab_size": len(vocabulary())}
    c.update(over)
    return c


MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
]
DENSE = {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}


def pooling(cls=False, mean=True, **over):
    p = {"word_embedding_dimension": 32, "pooling_mode_cls_token": cls,
         "pooling_mode_mean_tokens": mean, "pooling_mode_max_tokens": False,
         "pooling_mode_mean_sqrt_len_tokens": False}
    p.update(over)
    return p


def folder(*parts):
    return b"\0".join(p if isinstance(p, bytes) else dumps(p) for p in parts)


def encoder_config():
    sentence = {"max_seq_length": 48, "do_lower_case": False}
    bodies = [
        folder(bert_config(), MODULES, pooling(), sentence),
        folder(bert_config()),
        folder(bert_config(), MODULES[:2], pooling(cls=True, mean=False), {"max_seq_length": 0}),
        folder(bert_config(), MODULES, {"pooling_mode": "cls"}, {}),
        folder(bert_config(), [{"type": "sentence_transformers.models.Dense", "path": "2_Dense"}]),
        folder(bert_config(), MODULES[:2] + [DENSE] + MODULES[2:], pooling(cls=True, mean=False),
               sentence, {"in_features": 32, "out_features": 16, "bias": True,
                          "activation_function": "torch.nn.modules.activation.Tanh"}),
        folder(bert_config(), MODULES + [DENSE], pooling(), sentence,
               {"in_features": 32, "out_features": 8, "bias": False}),
        folder(bert_config(), MODULES[:2] + [dict(DENSE, path="../2_Dense")], pooling(), sentence,
               {"in_features": 32, "out_features": 8, "use_residual": True}),
        folder(bert_config(), MODULES, pooling(cls=True, mean=True), sentence),
        folder(bert_config(model_type="roberta", architectures=["BertModel"])),
        folder(bert_config(model_type="xlm-roberta", architectures=["XLMRobertaModel"],
                           pad_token_id=1, type_vocab_size=1, layer_norm_eps=1e-5),
               MODULES, pooling(), sentence),
        folder(bert_config(model_type="roberta", architectures=["RobertaForSequenceClassification"],
                           pad_token_id=62, num_labels=1)),
        folder(bert_config(model_type="mpnet", architectures=["MPNetModel"],
                           relative_attention_num_buckets=32, layer_norm_eps=1e-5),
               MODULES, pooling(), sentence),
        folder({"architectures": ["DistilBertModel"], "model_type": "distilbert",
                "activation": "gelu", "dim": 32, "hidden_dim": 64, "n_heads": 4, "n_layers": 2,
                "max_position_embeddings": 64, "vocab_size": len(vocabulary())},
               MODULES, pooling(), sentence),
        folder(bert_config(hidden_act="relu", position_embedding_type="relative_key")),
        folder(bert_config(model_type="modernbert", architectures=["ModernBertModel"],
                           hidden_activation="gelu", norm_eps=1e-5, global_attn_every_n_layers=2,
                           local_attention=8, global_rope_theta=160000.0, local_rope_theta=10000.0),
               MODULES, pooling(), sentence),
        folder(bert_config(model_type="modernbert", architectures=["ModernBertModel"],
                           layer_types=["full_attention", "sliding_attention"],
                           rope_parameters={"full_attention": {"rope_type": "default",
                                                               "rope_theta": 160000.0},
                                            "sliding_attention": {"rope_type": "yarn"}})),
        folder(bert_config(hidden_size=30, num_attention_heads=4)),
        folder(bert_config(layer_norm_eps=1e-50, max_position_embeddings=1)),
        folder(bert_config(vocab_size=0)),
        folder(bert_config(hidden_size=384, intermediate_size=1536, num_hidden_layers=6,
                           num_attention_heads=12, max_position_embeddings=512, vocab_size=30522),
               MODULES, pooling(word_embedding_dimension=384), {"max_seq_length": 256}),
        folder({"model_type": "bert"}),
        folder(b"not json", b"[]"),
    ]
    return write("encoder_config", bodies)


def encoder_weights():
    h, inter, positions, layers = 32, 64, 64, 2
    vocab = len(vocabulary())

    def tensors(matrix_dtype="F32", prefix="", old_norms=False):
        out = []
        def add(name, shape, dtype="F32"):
            n = 1
            for d in shape:
                n *= d
            if old_norms and "LayerNorm." in name:
                name = name.replace(".weight", ".gamma").replace(".bias", ".beta")
            out.append((prefix + name, dtype, shape, values(n, dtype, seed=len(out))))
        add("embeddings.word_embeddings.weight", [vocab, h])
        add("embeddings.position_embeddings.weight", [positions, h])
        add("embeddings.token_type_embeddings.weight", [2, h])
        add("embeddings.LayerNorm.weight", [h])
        add("embeddings.LayerNorm.bias", [h])
        for l in range(layers):
            p = f"encoder.layer.{l}"
            for name, n_in, n_out in [("attention.self.query", h, h), ("attention.self.key", h, h),
                                      ("attention.self.value", h, h), ("attention.output.dense", h, h),
                                      ("intermediate.dense", h, inter), ("output.dense", inter, h)]:
                add(f"{p}.{name}.weight", [n_out, n_in], matrix_dtype)
                add(f"{p}.{name}.bias", [n_out])
            for norm in ["attention.output.LayerNorm", "output.LayerNorm"]:
                add(f"{p}.{norm}.weight", [h])
                add(f"{p}.{norm}.bias", [h])
        return out

    full = tensors()
    bodies = [
        safetensors(full),
        safetensors(tensors("F16", prefix="bert.", old_norms=True)),
        safetensors(tensors("BF16")),
        safetensors(full[:-1]),
        safetensors(full + [("pooler.dense.weight", "F32", [1], b"\0" * 4),
                            ("embeddings.position_ids", "I64", [1], b"\0" * 8)]),
        safetensors(full + [("bert.embeddings.LayerNorm.bias", "F32", [h], values(h, "F32"))]),
        safetensors(full + [("unexpected", "F32", [1], b"\0" * 4)]),
    ]
    # query in f16, key in bf16: the stacked qkv falls back to f32
    mixed = tensors("F16")
    for i, (name, dtype, shape, raw) in enumerate(mixed):
        if name.endswith("attention.self.key.weight"):
            n = shape[0] * shape[1]
            mixed[i] = (name, "BF16", shape, values(n, "BF16"))
    bodies.append(safetensors(mixed))
    return write("encoder_weights", bodies)


def tokenize():
    texts = [
        "a man is eating food .",
        "the cat runs fast, and the dog runs slow!",
        "Ünïcödé ÄÖÜ ñ ç — “quotes” and 'apostrophes'",
        "中文字符 日本語 한국어 ไทย العربية עברית",
        "😀🎉👍🏽 emoji \u200d zero width \ufeff bom",
        "\u0000\u0001\u001f control \t\r\n whitespace \u3000",
        "İstanbul ǅ ﬃ ß ẞ Σσς ΐ",
        "x" * 150,
        " ".join(["word"] * 60),
        "a##b [CLS] [SEP] [UNK] [PAD] [MASK] ##s",
        "e\u0301 combining  a\u0308\u0308\u0308",
        "12345678901234567890 3.14159 -0 1e10",
        "<s> </s> <pad> <unk> <mask> \u2581word \u2581 \ufdfa",
        "  spaces   in  runs \n newline \t tab  " * 40,
    ]
    bodies = []
    # The first byte: bit 0 truncates, bit 1 picks the SentencePiece tokenizer.
    for i, t in enumerate(texts):
        bodies.append(bytes([i & 3]) + t.encode())
    bodies.append(b"\x00\xff\xfe invalid utf-8 \xc3")
    return write("tokenize", bodies)


def model_config():
    image = """name: "resnet"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "image" data_type: TYPE_FP32 dims: [ 3, -1, -1 ] } ]
output [ { name: "scores" data_type: TYPE_FP32 dims: [ 10 ] } ]
"""
    bodies = [
        image,
        image + "dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }\n",
        image + "dynamic_batching { priority_levels: 3 default_priority_level: 2 "
                "default_queue_policy { default_timeout_microseconds: 5000 max_queue_size: 16 } }\n",
        image + "instance_group [ { count: 2 kind: KIND_CPU }, { count: 1 kind: KIND_GPU gpus: [ 0, 1 ] } ]\n",
        image + 'parameters { key: "intra_op_thread_count" value: { string_value: "2" } }\n',
        image + "version_policy: { specific: { versions: [1, 3] } }\n",
        image + "optimization { graph { level: 1 } }\nresponse_cache { enable: true }\n",
        image + 'model_warmup [ { name: "w" batch_size: 1 inputs { key: "image" value: '
                '{ data_type: TYPE_FP32 dims: [ 3, 8, 8 ] zero_data: true } } } ]\n',
        image.replace("max_batch_size: 8", "max_batch_size: 0").replace("[ 3, -1, -1 ]", "[ -1, 3, -1, -1 ]"),
        image.replace("input [", "input: [") + "# a comment [ with a bracket\n",
        "backend: \"onnxruntime\"\ndefault_model_filename: \"net.onnx\"\n",
        'input [ { name: "image" data_type: TYPE_FP32 dims: [ 3, -1, -1 ] reshape: { shape: [ 3, -1, -1 ] } } ]\n',
        "sequence_batching { max_sequence_idle_microseconds: 5 }\n",
        "name: 'single quoted \\' escape'\nmax_batch_size: 0x10\n",
        "max_batch_size: [\n",
        "input [ { name: \"x\" data_type: TYPE_FLOAT } ]",
        "",
    ]
    return write("model_config", [b.encode() for b in bodies])


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(number, payload):
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def pb_input(name, datatype, shape, contents=b""):
    """ModelInferRequest.InferInputTensor: name 1, datatype 2, shape 3 (packed), contents 5."""
    shape_bytes = b"".join(varint(d & (2**64 - 1)) for d in shape)
    body = field(1, name.encode()) + field(2, datatype.encode()) + field(3, shape_bytes)
    return body + (field(5, contents) if contents else b"")


def pb_param(key, kind, value):
    """A map<string, InferParameter> entry: bool 1, int64 2, string 3, uint64 5."""
    choice = {"bool": lambda: varint(1 << 3) + varint(int(value)),
              "int64": lambda: varint(2 << 3) + varint(value & (2**64 - 1)),
              "string": lambda: field(3, value.encode()),
              "uint64": lambda: varint(5 << 3) + varint(value)}[kind]()
    return field(4, field(1, key.encode()) + field(2, choice))


def grpc_infer():
    """ModelInferRequest messages (model_name 1, id 3, parameters 4, inputs 5, outputs 6,
    raw_input_contents 7), as tritonclient.grpc and typed-contents clients send them."""
    row = f32s(ROW)
    fp32 = field(6, row)  # InferTensorContents.fp32_contents, packed
    texts = [b"a man is eating food .", b"the cat runs", "caf\u00e9 \u4e2d\u6587".encode()]
    model = field(1, b"digits")
    bodies = [
        model + field(5, pb_input("input-0", "FP32", [1, W])) + field(7, row),
        model + field(3, b"id-1") + field(5, pb_input("input-0", "FP32", [1, W], fp32)),
        model + field(5, pb_input("input-0", "FP32", [2, W])) + field(7, row),
        model + field(5, pb_input("input-0", "FP32", [1, W], field(2, varint(1) * W))),
        model + field(5, pb_input("input-0", "INT8", [1, W], field(2, varint(300) * W))),
        model + field(5, pb_input("input-0", "INT64", [1, W], field(3, varint(7) * W))),
        model + field(5, pb_input("input-0", "BOOL", [1, W], field(1, b"\x01\x00" * (W // 2)))),
        model + field(5, pb_input("input-0", "FP16", [1, W], fp32)),
        model + field(5, pb_input("input-0", "FP16", [1, W])) + field(7, b"\x00\x3c" * W),
        model + field(5, pb_input("input-0", "FP32", [1, W])) + field(7, row) + field(7, row),
        model + field(5, pb_input("input-0", "FP32", [-1, W])) + field(7, row),
        model + field(5, pb_input("input-0", "FP32", [1, W])) + field(7, row)
        + pb_param("priority", "uint64", 2) + pb_param("timeout", "int64", -5)
        + pb_param("cache", "string", "no") + field(6, field(1, b"output-0")),
        model + field(5, pb_input("text", "BYTES", [3], b"".join(field(8, t) for t in texts)))
        + pb_param("normalize", "bool", False) + pb_param("prompt_name", "string", "query"),
        model + field(5, pb_input("text", "BYTES", [2])) + field(7, bytes_elements(texts[:2])),
        model + field(5, pb_input("text", "BYTES", [1])) + field(7, b"\x05\0\0\0a"),
        model + field(5, pb_input("text", "BYTES", [1], field(8, b"\xe9"))),
        b"\xff\xff\xff",
        b"",
    ]
    return write("grpc_infer", bodies)


def main():
    counts = {f.__name__: f() for f in [infer_json, infer_binary, content_coding, admin_json,
                                         embeddings_json, coloc_line, checkpoint, encoder_config,
                                         encoder_weights, tokenize, model_config, grpc_infer]}
    total = sum(p.stat().st_size for p in CORPUS.rglob("*") if p.is_file())
    for name, n in counts.items():
        print(f"{name}: {n} seeds")
    print(f"{total} bytes in all")


if __name__ == "__main__":
    main()
