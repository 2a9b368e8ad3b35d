"""A float64 reference of a BERT-family sentence encoder (BERT, DistilBERT, MPNet, RoBERTa,
XLM-RoBERTa, ModernBERT, NomicBERT), written from the architecture.

Not from sentence-transformers or torch: the weights are read with `safetensors.numpy` and
every step (embeddings, attention, feed-forward, layer norms, pooling) is spelled out in
numpy, so the Rust encoder is checked against an independent implementation.

Commands (JSON on stdin, JSON on stdout):

  embed DIR     stdin {"sequences": [{"ids": [...], "type_ids": [...]}, ...],
                       "pooling": "mean" | "cls"}
                stdout {"embeddings": [[...], ...]}  (pooled, then through the folder's
                sentence-transformers Dense modules if modules.json lists any; not
                normalised; float64)
  states DIR    stdin {"sequences": [...]} as for embed
                stdout {"states": [[[...], ...], ...]}  (every token's final state of each
                sequence: what pooling reads; float64)
  sparse DIR    stdin {"sequences": [...], "pooling": "max" | "sum"} of a BertForMaskedLM
                stdout {"weights": [[...], ...]}  (SPLADE: every token's state through
                cls.predictions (dense, GELU, layer norm, then the decoder tied to the word
                embeddings unless it has its own weight, plus its bias), log(1 + relu) of
                each logit, the max or the sum over the sequence; one weight a vocabulary
                entry; float64)
  classify DIR  stdin {"sequences": [...]} as for embed, of a BertForSequenceClassification,
                (XLM)RobertaForSequenceClassification, DistilBert..., MPNet... or
                ModernBertForSequenceClassification
                stdout {"logits": [[...], ...]}  (one per label: the first token's state
                through a dense layer and tanh, then the output layer: BERT's pooler and
                classifier, RoBERTa's classifier.dense and classifier.out_proj; DistilBERT's
                pre_classifier with a ReLU, then classifier; ModernBERT's pooled states
                through head.dense, GELU and head.norm, then classifier)
  convert SRC DST DTYPE
                copies the model folder SRC to DST with every floating-point tensor of
                model.safetensors stored as DTYPE (F16 or BF16, rounded to nearest even);
                prints nothing
"""

import json
import math
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

SKIPPED = ("embeddings.position_ids",)
ROBERTA = ("roberta", "xlm-roberta")
# Positions after the padding id, and RoBERTa's classifier head.
AFTER_PADDING = ROBERTA + ("mpnet",)
# MPNet's layers are BERT's under other names, plus a bias by relative position.
MPNET_NAMES = (
    (".attention.attn.q.", ".attention.self.query."),
    (".attention.attn.k.", ".attention.self.key."),
    (".attention.attn.v.", ".attention.self.value."),
    (".attention.attn.o.", ".attention.output.dense."),
    (".attention.LayerNorm.", ".attention.output.LayerNorm."),
)
# DistilBERT's layers are BERT's (post-norm, GELU) under other names.
DISTILBERT_NAMES = (
    ("transformer.layer.", "encoder.layer."),
    (".attention.q_lin.", ".attention.self.query."),
    (".attention.k_lin.", ".attention.self.key."),
    (".attention.v_lin.", ".attention.self.value."),
    (".attention.out_lin.", ".attention.output.dense."),
    (".sa_layer_norm.", ".attention.output.LayerNorm."),
    (".ffn.lin1.", ".intermediate.dense."),
    (".ffn.lin2.", ".output.dense."),
    (".output_layer_norm.", ".output.LayerNorm."),
)


def load_weights(folder, head=False):
    """The tensors as float64, names without the `bert.`, `distilbert.`, `roberta.` (...)
    prefix and DistilBERT's as BERT's, with DistilBERT's missing token type table as
    zeros; the pooler only with `head`."""
    raw = load_file(str(Path(folder) / "model.safetensors"))
    weights = {}
    for name, value in raw.items():
        for prefix in ("bert.", "distilbert.", "mpnet.", "roberta.", "model.", "new."):
            name = name[len(prefix) :] if name.startswith(prefix) else name
        for theirs, ours in DISTILBERT_NAMES + MPNET_NAMES:
            name = name.replace(theirs, ours)
        if name in SKIPPED or (not head and name.startswith("pooler.")):
            continue
        weights[name] = value.astype(np.float64)
    types = "embeddings.token_type_embeddings.weight"
    if types not in weights and "embeddings.word_embeddings.weight" in weights:
        hidden = weights["embeddings.word_embeddings.weight"].shape[1]
        weights[types] = np.zeros((2, hidden))
    return weights


def read_config(folder):
    """config.json, with DistilBERT's names and its fixed epsilon as BERT's."""
    cfg = json.loads((Path(folder) / "config.json").read_text())
    for theirs, ours in (("n_layers", "num_hidden_layers"), ("n_heads", "num_attention_heads")):
        if theirs in cfg:
            cfg[ours] = cfg[theirs]
    if cfg.get("model_type") == "distilbert":
        cfg["layer_norm_eps"] = 1e-12  # DistilBERT's LayerNorms fix it.
    if cfg.get("model_type") == "mpnet":
        cfg["pad_token_id"] = 1  # MPNetEmbeddings fixes its padding index.
    cfg.setdefault("layer_norm_eps", 1e-12)
    return cfg


def position_ids(ids, cfg):
    """BERT counts positions from 0. RoBERTa counts from pad_token_id + 1 over the tokens
    that are not padding; a padding token takes pad_token_id (transformers'
    create_position_ids_from_input_ids)."""
    if cfg.get("model_type") not in AFTER_PADDING:
        return np.arange(len(ids))
    pad = cfg.get("pad_token_id", 1)
    mask = (ids != pad).astype(np.int64)
    return np.cumsum(mask) * mask + pad


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


_erf = np.frompyfunc(math.erf, 1, 1)


def gelu(x):
    """GELU with the exact error function (BERT's `gelu`, not the tanh approximation)."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def linear(x, w, prefix):
    return x @ w[prefix + ".weight"].T + w[prefix + ".bias"]


def softmax(s):
    s = s - s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def relative_bucket(relative, buckets=32, max_distance=128):
    """MPNet's bucket of key j's position relative to query i (j - i), as transformers'
    relative_position_bucket computes it: half the buckets for keys after the query, each
    half exact below 8 and logarithmic up to max_distance, in float32 as torch does."""
    half = buckets // 2
    exact = half // 2
    n = np.abs(relative)
    log = np.log(np.maximum(n, 1).astype(np.float32) / np.float32(exact))
    large = exact + (log / np.float32(math.log(max_distance / exact)) * np.float32(half - exact))
    large = np.minimum(large.astype(np.int64), half - 1)
    return np.where(relative > 0, half, 0) + np.where(n < exact, n, large)


def position_bias(w, n):
    """[heads, n, n]: MPNet's bias of query i's score for key j, or zeros."""
    table = w.get("encoder.relative_attention_bias.weight")
    if table is None:
        return 0.0
    relative = np.arange(n)[None, :] - np.arange(n)[:, None]
    return table[relative_bucket(relative)].transpose(2, 0, 1)


def attention(x, w, p, heads, bias):
    n, hidden = x.shape
    d = hidden // heads
    q = linear(x, w, p + ".self.query").reshape(n, heads, d).transpose(1, 0, 2)
    k = linear(x, w, p + ".self.key").reshape(n, heads, d).transpose(1, 0, 2)
    v = linear(x, w, p + ".self.value").reshape(n, heads, d).transpose(1, 0, 2)
    probs = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(d) + bias)  # [heads, n, n]
    context = (probs @ v).transpose(1, 0, 2).reshape(n, hidden)
    return linear(context, w, p + ".output.dense")


def encode(ids, type_ids, w, cfg):
    eps = cfg["layer_norm_eps"]
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][position_ids(ids, cfg)]
        + w["embeddings.token_type_embeddings.weight"][type_ids]
    )
    x = layer_norm(
        x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps
    )
    bias = position_bias(w, len(ids))
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        a = attention(x, w, p + ".attention", cfg["num_attention_heads"], bias)
        x = layer_norm(
            x + a,
            w[p + ".attention.output.LayerNorm.weight"],
            w[p + ".attention.output.LayerNorm.bias"],
            eps,
        )
        h = gelu(linear(x, w, p + ".intermediate.dense"))
        x = layer_norm(
            x + linear(h, w, p + ".output.dense"),
            w[p + ".output.LayerNorm.weight"],
            w[p + ".output.LayerNorm.bias"],
            eps,
        )
    return x


def rotary(t, positions, theta):
    """Rotary position embedding of t [heads, n, d] (transformers' rotate_half form): value j
    of each half turned with value j of the other by angle position / theta^(2j/d)."""
    d = t.shape[-1]
    return rotary_by(t, positions, theta ** -(np.arange(0, d, 2) / d))


def rotary_by(t, positions, frequencies):
    """Rotary position embedding of t [heads, n, d] by each pair's frequency."""
    d = t.shape[-1]
    angles = positions[:, None] * frequencies
    cos = np.cos(np.concatenate([angles, angles], -1))
    sin = np.sin(np.concatenate([angles, angles], -1))
    first, second = t[..., : d // 2], t[..., d // 2 :]
    return t * cos + np.concatenate([-second, first], -1) * sin


def modern_encode(ids, w, cfg):
    """ModernBERT: pre-norm layers without biases or position table; rotary queries and
    keys; every global_attn_every_n_layers-th layer (from 0) attends to the whole sequence
    with global_rope_theta, the others to keys at most local_attention / 2 away with
    local_rope_theta; a GELU-gated feed-forward; a final norm."""
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    inter, d = cfg["intermediate_size"], hidden // heads
    eps = cfg.get("norm_eps", 1e-5)
    every = cfg.get("global_attn_every_n_layers", 3)
    window = cfg.get("local_attention", 128) // 2
    thetas = [cfg.get("global_rope_theta", 160000.0), cfg.get("local_rope_theta", 10000.0)]
    # transformers 5's form: the bases by layer type.
    for j, kind in enumerate(("full_attention", "sliding_attention")):
        thetas[j] = ((cfg.get("rope_parameters") or {}).get(kind) or {}).get("rope_theta", thetas[j])

    def norm(x, name):
        return layer_norm(x, w[name + ".weight"], 0.0, eps)

    n = len(ids)
    positions = np.arange(n)
    far = np.abs(positions[:, None] - positions[None, :]) > window
    x = norm(w["embeddings.tok_embeddings.weight"][ids], "embeddings.norm")
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}"
        is_global = i % every == 0
        a = x if i == 0 else norm(x, p + ".attn_norm")
        qkv = a @ w[p + ".attn.Wqkv.weight"].T
        q, k, v = (qkv[:, j * hidden : (j + 1) * hidden].reshape(n, heads, d).transpose(1, 0, 2)
                   for j in range(3))
        theta = thetas[0] if is_global else thetas[1]
        q, k = rotary(q, positions, theta), rotary(k, positions, theta)
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        if not is_global:
            scores = np.where(far[None], -np.inf, scores)
        context = (softmax(scores) @ v).transpose(1, 0, 2).reshape(n, hidden)
        x = x + context @ w[p + ".attn.Wo.weight"].T
        up = norm(x, p + ".mlp_norm") @ w[p + ".mlp.Wi.weight"].T
        x = x + (gelu(up[:, :inter]) * up[:, inter:]) @ w[p + ".mlp.Wo.weight"].T
    return norm(x, "final_norm")


def silu(x):
    return x / (1.0 + np.exp(-x))


def nomic_encode(ids, type_ids, w, cfg):
    """NomicBERT (nomic_bert): the word and token type embeddings through emb_ln; then BERT's
    post-norm layers with a fused Wqkv, rotary queries and keys (rotate_half, base
    rotary_emb_base, positions from 0) and a gated feed-forward fc2(fc11(x) * act(fc12(x))),
    act SiLU for swiglu and GELU for geglu; biases where the config gives them; no final
    norm."""
    hidden, heads = cfg["n_embd"], cfg["n_head"]
    d = hidden // heads
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    act = silu if cfg["activation_function"] == "swiglu" else gelu
    theta = cfg.get("rotary_emb_base", 1000)

    def lin(x, name):
        return x @ w[name + ".weight"].T + w.get(name + ".bias", 0.0)

    def norm(x, name):
        return layer_norm(x, w[name + ".weight"], w[name + ".bias"], eps)

    frequencies = theta ** -(np.arange(0, d, 2) / d)
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.token_type_embeddings.weight"][type_ids]
    x = norm(x, "emb_ln")
    for i in range(cfg["n_layer"]):
        p = f"encoder.layers.{i}"
        context = rotary_attention(lin(x, p + ".attn.Wqkv"), heads, frequencies)
        x = norm(x + lin(context, p + ".attn.out_proj"), p + ".norm1")
        h = lin(x, p + ".mlp.fc11") * act(lin(x, p + ".mlp.fc12"))
        x = norm(x + lin(h, p + ".mlp.fc2"), p + ".norm2")
    return x


def rotary_attention(qkv, heads, frequencies):
    """One sequence's self-attention from its fused [q; k; v] rows, queries and keys turned
    by rotary_by (positions from 0): the context, [n, hidden]."""
    n, hidden = qkv.shape[0], qkv.shape[1] // 3
    d = hidden // heads
    q, k, v = (qkv[:, j * hidden : (j + 1) * hidden].reshape(n, heads, d).transpose(1, 0, 2)
               for j in range(3))
    positions = np.arange(n)
    q, k = rotary_by(q, positions, frequencies), rotary_by(k, positions, frequencies)
    probs = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(d))
    return (probs @ v).transpose(1, 0, 2).reshape(n, hidden)


def gte_frequencies(theta, scaling, d):
    """GTE's rotary frequencies: theta^(-2j/d), or with its NTK scaling (rope_scaling type
    ntk) (theta * factor)^(-2j/d) / factor^(2/d), or with mixed_b theta^(-2j/d) /
    exp(ln(factor) * ((j + 1) / (d / 2))^mixed_b)."""
    k = np.arange(0, d, 2) / d
    if not scaling:
        return theta ** -k
    factor, mixed_b = scaling["factor"], scaling.get("mixed_b")
    if mixed_b is None:
        return (theta * factor) ** -k / factor ** (2 / d)
    j = np.arange(1, d // 2 + 1)
    return theta ** -k / np.exp(math.log(factor) * (j / (d / 2)) ** mixed_b)


def gte_encode(ids, type_ids, w, cfg):
    """GTE (model_type new, NewModel): the word and (where type_vocab_size is not 0) token
    type embeddings through embeddings.LayerNorm; then BERT's post-norm layers with a fused
    qkv_proj, rotary queries and keys by gte_frequencies (positions from 0), and a gated
    feed-forward down_proj(up * act(gate)) with [up; gate] = up_gate_proj(x), no bias on
    up_gate_proj; no final norm."""
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    d = hidden // heads
    eps = cfg.get("layer_norm_eps", 1e-12)
    act = {"gelu": gelu, "silu": silu, "swish": silu}[cfg.get("hidden_act", "gelu")]
    frequencies = gte_frequencies(cfg.get("rope_theta", 10000.0), cfg.get("rope_scaling"), d)

    def lin(x, name):
        return x @ w[name + ".weight"].T + w.get(name + ".bias", 0.0)

    def norm(x, name):
        return layer_norm(x, w[name + ".weight"], w[name + ".bias"], eps)

    x = w["embeddings.word_embeddings.weight"][ids]
    if cfg.get("type_vocab_size", 1) > 0:
        x = x + w["embeddings.token_type_embeddings.weight"][type_ids]
    x = norm(x, "embeddings.LayerNorm")
    inter = cfg["intermediate_size"]
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        context = rotary_attention(lin(x, p + ".attention.qkv_proj"), heads, frequencies)
        x = norm(x + lin(context, p + ".attention.o_proj"), p + ".attn_ln")
        up_gate = lin(x, p + ".mlp.up_gate_proj")
        h = up_gate[:, :inter] * act(up_gate[:, inter:])
        x = norm(x + lin(h, p + ".mlp.down_proj"), p + ".mlp_ln")
    return x


def modern_classify(ids, w, cfg):
    """ModernBertForSequenceClassification: the final states pooled by classifier_pooling
    (the first token's, or the mean), then head.dense, GELU and head.norm (no bias), then
    the classifier."""
    states = modern_encode(ids, w, cfg)
    pooled = states.mean(0) if cfg.get("classifier_pooling", "cls") == "mean" else states[0]
    x = pooled @ w["head.dense.weight"].T + w.get("head.dense.bias", 0.0)
    x = layer_norm(gelu(x), w["head.norm.weight"], 0.0, cfg.get("norm_eps", 1e-5))
    return linear(x, w, "classifier")


# A Dense module's activation_function, by the torch class sentence-transformers names.
ACTIVATIONS = {
    "torch.nn.modules.activation.Tanh": np.tanh,
    "torch.nn.modules.linear.Identity": lambda x: x,
    "torch.nn.modules.activation.ReLU": lambda x: np.maximum(x, 0.0),
}


def dense_modules(folder):
    """The Dense modules modules.json lists, in order: (weight, bias, activation) each,
    read from the module's own folder. Without an activation_function the module uses
    sentence-transformers' default, tanh; with bias false, it has no bias."""
    path = Path(folder) / "modules.json"
    if not path.exists():
        return []
    modules = []
    for module in json.loads(path.read_text()):
        if not module["type"].endswith(".Dense"):
            continue
        where = Path(folder) / module["path"]
        cfg = json.loads((where / "config.json").read_text())
        tensors = load_file(str(where / "model.safetensors"))
        weight = tensors["linear.weight"].astype(np.float64)
        bias = np.zeros(weight.shape[0])
        if cfg.get("bias", True):
            bias = tensors["linear.bias"].astype(np.float64)
        activation = ACTIVATIONS[cfg.get("activation_function", "torch.nn.modules.activation.Tanh")]
        modules.append((weight, bias, activation))
    return modules


def final_states(seq, w, cfg):
    """Every token's state after the last layer (and ModernBERT's final norm)."""
    if cfg.get("model_type") == "modernbert":
        return modern_encode(np.array(seq["ids"]), w, cfg)
    if cfg.get("model_type") == "nomic_bert":
        return nomic_encode(np.array(seq["ids"]), np.array(seq["type_ids"]), w, cfg)
    if cfg.get("model_type") == "new":
        return gte_encode(np.array(seq["ids"]), np.array(seq["type_ids"]), w, cfg)
    return encode(np.array(seq["ids"]), np.array(seq["type_ids"]), w, cfg)


def states(folder):
    request = json.load(sys.stdin)
    cfg = read_config(folder)
    w = load_weights(folder)
    out = [final_states(seq, w, cfg).tolist() for seq in request["sequences"]]
    json.dump({"states": out}, sys.stdout)


def sparse(folder):
    request = json.load(sys.stdin)
    cfg = read_config(folder)
    w = load_weights(folder)
    p = "cls.predictions"
    decoder = w.get(p + ".decoder.weight", w["embeddings.word_embeddings.weight"])
    out = []
    for seq in request["sequences"]:
        x = gelu(linear(final_states(seq, w, cfg), w, p + ".transform.dense"))
        x = layer_norm(x, w[p + ".transform.LayerNorm.weight"], w[p + ".transform.LayerNorm.bias"],
                       cfg["layer_norm_eps"])
        activated = np.log1p(np.maximum(x @ decoder.T + w[p + ".bias"], 0.0))
        pooled = activated.sum(0) if request.get("pooling", "max") == "sum" else activated.max(0)
        out.append(pooled.tolist())
    json.dump({"weights": out}, sys.stdout)


def embed(folder):
    request = json.load(sys.stdin)
    cfg = read_config(folder)
    w = load_weights(folder)
    dense = dense_modules(folder)
    out = []
    for seq in request["sequences"]:
        states = final_states(seq, w, cfg)
        pooled = states[0] if request.get("pooling", "mean") == "cls" else states.mean(0)
        for weight, bias, activation in dense:
            pooled = activation(weight @ pooled + bias)
        out.append(pooled.tolist())
    json.dump({"embeddings": out}, sys.stdout)


def classify(folder):
    request = json.load(sys.stdin)
    cfg = read_config(folder)
    w = load_weights(folder, head=True)
    out = []
    for seq in request["sequences"]:
        if cfg.get("model_type") == "modernbert":
            out.append(modern_classify(np.array(seq["ids"]), w, cfg).tolist())
            continue
        states = final_states(seq, w, cfg)
        if cfg.get("model_type") in AFTER_PADDING:
            pooled = np.tanh(linear(states[0], w, "classifier.dense"))
            out.append(linear(pooled, w, "classifier.out_proj").tolist())
        elif cfg.get("model_type") == "distilbert":
            pooled = np.maximum(linear(states[0], w, "pre_classifier"), 0.0)
            out.append(linear(pooled, w, "classifier").tolist())
        else:  # BERT's head, and GTE's NewForSequenceClassification
            pooled = np.tanh(linear(states[0], w, "pooler.dense"))
            out.append(linear(pooled, w, "classifier").tolist())
    json.dump({"logits": out}, sys.stdout)


def f32_to_16_bits(values, dtype):
    """float32 array -> uint16 bits of F16 or BF16, rounded to nearest even."""
    if dtype == "F16":
        return values.astype(np.float16).view(np.uint16)
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def write_safetensors(path, tensors):
    """tensors: name -> (dtype string, shape, bytes). The format is a little-endian u64
    header length, a JSON header, then the data; written by hand because numpy has no
    bfloat16."""
    header, offset, blobs = {}, 0, []
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def convert(src, dst, dtype):
    if dtype not in ("F16", "BF16"):
        sys.exit(f"convert: dtype must be F16 or BF16, not {dtype}")
    src, dst = Path(src), Path(dst)
    shutil.copytree(src, dst, dirs_exist_ok=True)
    raw = load_file(str(src / "model.safetensors"))
    tensors = {}
    for name, value in raw.items():
        if value.dtype == np.float32:
            bits = f32_to_16_bits(value, dtype)
            tensors[name] = (dtype, value.shape, bits.tobytes())
        elif value.dtype == np.int64:
            tensors[name] = ("I64", value.shape, value.tobytes())
        else:
            sys.exit(f"convert: {name} has dtype {value.dtype}, expected float32 or int64")
    write_safetensors(dst / "model.safetensors", tensors)


def main(argv):
    if len(argv) == 3 and argv[1] == "embed":
        embed(argv[2])
    elif len(argv) == 3 and argv[1] == "sparse":
        sparse(argv[2])
    elif len(argv) == 3 and argv[1] == "states":
        states(argv[2])
    elif len(argv) == 3 and argv[1] == "classify":
        classify(argv[2])
    elif len(argv) == 5 and argv[1] == "convert":
        convert(argv[2], argv[3], argv[4])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
