"""Real clients against a text model served by tandem: tritonclient.http with BYTES in
JSON and in the binary extension, the openai client's embeddings.create, with texts and with
the token ids Python's `tokenizers` gives for them, and huggingface_hub's
InferenceClient.feature_extraction (TEI's `POST /`) — all unchanged, all giving the same
embeddings as tandem's own /v1/embeddings; huggingface_hub's sentence_similarity giving
their cosines, and its feature_extraction cutting a long text's start off as Python's
`tokenizers` does, and seeing TEI's status codes on refusals; the openai client's
models.list() and models.retrieve() finding the model; and TEI's /tokenize and /decode
agreeing with Python's `tokenizers`.

    python tests/python/text_clients_check.py --url 127.0.0.1:8000 --model enc \
        --tokenizer DIR/tokenizer.json [--pair-score S]

With --pair-score, the cosine of "A man is eating food." and "A man is eating a piece of
bread." must be S within 0.0005 through every client. Exits non-zero on any mismatch.
Run by tests/text_serving.rs.
"""

import argparse
import base64
import json
import urllib.request

import numpy as np
import openai
import tokenizers
import tritonclient.http as httpclient
from huggingface_hub import InferenceClient
from huggingface_hub.errors import HfHubHTTPError

PAIR = ["A man is eating food.", "A man is eating a piece of bread."]
TEXTS = PAIR + ["a cat runs fast", "the big red dog is eating bread with a woman"]


def own(url, model, texts):
    body = json.dumps({"model": model, "input": texts}).encode()
    req = urllib.request.Request(f"http://{url}/v1/embeddings", data=body)
    with urllib.request.urlopen(req) as r:
        data = json.load(r)["data"]
    return np.array([d["embedding"] for d in data], dtype=np.float64)


def triton(url, model, texts, binary):
    client = httpclient.InferenceServerClient(url=url)
    assert client.is_model_ready(model)
    meta = client.get_model_metadata(model)
    assert meta["inputs"][0]["datatype"] == "BYTES", meta
    config = client.get_model_config(model)
    assert config["input"][0]["data_type"] == "TYPE_STRING", config
    text = np.array([[t.encode()] for t in texts], dtype=np.object_)
    inp = httpclient.InferInput("text", list(text.shape), "BYTES")
    inp.set_data_from_numpy(text, binary_data=binary)
    out = httpclient.InferRequestedOutput("embedding", binary_data=binary)
    result = client.infer(model, [inp], outputs=[out])
    return result.as_numpy("embedding").astype(np.float64)


def with_openai(url, model, texts, encoding):
    """encoding None: the client's default (it asks for base64 and decodes it itself)."""
    client = openai.OpenAI(base_url=f"http://{url}/v1", api_key="unused")
    extra = {} if encoding is None else {"encoding_format": encoding}
    r = client.embeddings.create(model=model, input=texts, **extra)
    assert r.usage.prompt_tokens > 0, r.usage
    rows = []
    for d in r.data:
        e = d.embedding
        if isinstance(e, str):
            e = np.frombuffer(base64.b64decode(e), dtype="<f4")
        rows.append(np.asarray(e, dtype=np.float64))
    return np.array(rows)


def listed(url, model):
    """The openai client's model listing and lookup find `model`; an unknown one is its
    NotFoundError."""
    client = openai.OpenAI(base_url=f"http://{url}/v1", api_key="unused")
    assert model in [m.id for m in client.models.list()], model
    assert client.models.retrieve(model).id == model
    try:
        client.models.retrieve(model + "-not-loaded")
    except openai.NotFoundError:
        return
    raise AssertionError("an unknown model was found")


def with_huggingface_hub(url, texts):
    """TEI's way: the client posts to the server's own URL; TEI normalises by default, so the
    rows are compared with /v1/embeddings' normalised."""
    client = InferenceClient(model=f"http://{url}")
    return client.feature_extraction(texts).astype(np.float64)


def similarity_with_huggingface_hub(url, texts, unit):
    """huggingface_hub's sentence_similarity posts to the server's URL, as against TEI: the
    cosines of the first text with the others, from the normalised embeddings."""
    client = InferenceClient(model=f"http://{url}")
    got = np.array(client.sentence_similarity(texts[0], texts[1:]), dtype=np.float64)
    want = unit[1:] @ unit[0]
    assert np.allclose(got, want, atol=1e-6), (got, want)


def truncated_from_the_left(url, model, path):
    """huggingface_hub's truncation_direction="left" (TEI's "Left"): a text past the limit
    embeds as the ids Python's `tokenizers` keeps when it cuts the start off."""
    text = " ".join(TEXTS[2:] * 80 + PAIR)
    tokenizer = tokenizers.Tokenizer.from_file(path)
    tokenizer.no_padding()
    limit = post(url, "/info", None)["max_input_length"]
    tokenizer.enable_truncation(limit, direction="left")
    ids = tokenizer.encode(text).ids
    assert len(ids) == limit, len(ids)
    want = own(url, model, [ids])
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    client = InferenceClient(model=f"http://{url}")
    got = client.feature_extraction(text, truncation_direction="left").astype(np.float64)
    assert np.allclose(got, want, atol=1e-6), np.abs(got - want).max()
    start = client.feature_extraction(text).astype(np.float64)
    assert not np.allclose(start, want, atol=1e-3), "the start kept"


def refused_as_tei_refuses(url):
    """huggingface_hub sees TEI's codes and error types: a text past the limit with
    truncate=False is a 413 (a client may split and retry), an empty one a 400."""
    client = InferenceClient(model=f"http://{url}")
    cases = [
        ({"text": " ".join(TEXTS * 100), "truncate": False}, 413, "Validation"),
        ({"text": ""}, 400, "Empty"),
    ]
    for kwargs, status, kind in cases:
        try:
            client.feature_extraction(**kwargs)
        except HfHubHTTPError as e:
            got = (e.response.status_code, e.response.json()["error_type"])
            assert got == (status, kind), (kwargs.get("text", "")[:20], got)
        else:
            raise AssertionError(f"not refused: {kwargs.get('text', '')[:20]!r}")


def tokenize_parity(url, path):
    """TEI's /tokenize gives Python's tokens for these texts, each with the text its offsets
    cover and those offsets in bytes (Python's are in characters), and /decode gives
    Python's decoding."""
    tokenizer = tokenizers.Tokenizer.from_file(path)
    tokenizer.no_padding()
    tokenizer.no_truncation()
    texts = TEXTS + ["Héllo, WÖRLD! naïve café 東京 😀 x"]
    got = post(url, "/tokenize", {"inputs": texts})
    for text, tokens in zip(texts, got):
        e = tokenizer.encode(text)
        in_bytes = lambda chars: len(text[:chars].encode())
        want = [(i, tok, None, None) if special else
                (i, text[start:stop], in_bytes(start), in_bytes(stop))
                for i, (start, stop), special, tok
                in zip(e.ids, e.offsets, e.special_tokens_mask, e.tokens)]
        got_tokens = [(t["id"], t["text"], t["start"], t["stop"]) for t in tokens]
        assert got_tokens == want, (text, tokens)
        assert post(url, "/decode", {"ids": e.ids}) == [tokenizer.decode(e.ids)], text


def post(url, path, body):
    """`body` as JSON, or a GET without one."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{url}{path}", data=data)
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def token_ids(path, texts):
    """The model's own ids for `texts`, special tokens included, with the padding and
    truncation the folder's tokenizer.json may fix switched off."""
    tokenizer = tokenizers.Tokenizer.from_file(path)
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return [e.ids for e in tokenizer.encode_batch(texts)]


def cosine(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--tokenizer", required=True, help="the model's tokenizer.json")
    p.add_argument("--pair-score", type=float)
    args = p.parse_args()
    listed(args.url, args.model)
    tokenize_parity(args.url, args.tokenizer)
    want = own(args.url, args.model, TEXTS)
    got = {
        "tritonclient JSON": triton(args.url, args.model, TEXTS, binary=False),
        "tritonclient binary": triton(args.url, args.model, TEXTS, binary=True),
        "openai default": with_openai(args.url, args.model, TEXTS, None),
        "openai float": with_openai(args.url, args.model, TEXTS, "float"),
        "openai base64": with_openai(args.url, args.model, TEXTS, "base64"),
        "openai token ids": with_openai(args.url, args.model,
                                        token_ids(args.tokenizer, TEXTS), None),
        "huggingface_hub": with_huggingface_hub(args.url, TEXTS),
    }
    unit = want / np.linalg.norm(want, axis=1, keepdims=True)
    similarity_with_huggingface_hub(args.url, TEXTS, unit)
    truncated_from_the_left(args.url, args.model, args.tokenizer)
    refused_as_tei_refuses(args.url)
    for name, emb in got.items():
        expected = unit if name == "huggingface_hub" else want
        assert emb.shape == expected.shape, (name, emb.shape, expected.shape)
        assert np.allclose(emb, expected, atol=1e-6), (name, np.abs(emb - expected).max())
        if args.pair_score is not None:
            s = cosine(emb[0], emb[1])
            assert abs(s - args.pair_score) <= 5e-4, (name, s)
    print("all checks passed")


if __name__ == "__main__":
    main()
