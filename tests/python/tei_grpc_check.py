"""TEI's gRPC API (tei.v1) against a running tandem, with stubs generated here from
gateway/proto/tei.proto by grpcio-tools, as a TEI gRPC user generates them from TEI's file;
every answer checked against the same request over TEI's HTTP routes.

    python tests/python/tei_grpc_check.py --grpc 127.0.0.1:8001 --http 127.0.0.1:8000 \
        --proto gateway/proto --embed enc --sparse sparse --classifier nli --reranker rerank

Exits non-zero (with the assertion) on any mismatch; prints "all checks passed".
"""

import argparse
import importlib
import json
import sys
import tempfile
import urllib.request

import grpc
import numpy as np
from grpc_tools import protoc


def stubs(proto_dir):
    out = tempfile.mkdtemp(prefix="tei-stubs-")
    code = protoc.main(["protoc", f"-I{proto_dir}", f"--python_out={out}",
                        f"--grpc_python_out={out}", f"{proto_dir}/tei.proto"])
    assert code == 0, "protoc failed on tei.proto"
    sys.path.insert(0, out)
    return importlib.import_module("tei_pb2"), importlib.import_module("tei_pb2_grpc")


def post(http, path, body):
    req = urllib.request.Request(f"http://{http}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def expect(call, code, *says):
    try:
        call()
    except grpc.RpcError as e:
        assert e.code() == code, (e.code(), e.details())
        for s in says:
            assert s in e.details(), (s, e.details())
        return
    raise AssertionError(f"expected {code}")


def same(got, want, what):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape and np.array_equal(got, want), f"{what}: {got} vs {want}"


def close(got, want, what):
    """Requests streamed at once are batched together, and a batch's rows may round
    differently from a batch of one."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-5), \
        f"{what}: {got} vs {want}"


def check_embed(pb, grpc_mod, channel, args):
    embed = grpc_mod.EmbedStub(channel)
    model = (("model", args.embed),)
    texts = ["a man is eating food .", "caf\u00e9 au lait", "the cat runs", "one", "two words"]
    for t in texts[:2]:
        got = embed.Embed(pb.EmbedRequest(inputs=t, truncate=True), metadata=model)
        want = post(args.http, "/embed", {"inputs": t, "model": args.embed, "truncate": True})[0]
        same(got.embeddings, want, f"Embed {t!r}")
        assert got.metadata.compute_tokens > 0, got.metadata
    streamed = embed.EmbedStream(iter([pb.EmbedRequest(inputs=t) for t in texts]), metadata=model)
    for t, got in zip(texts, streamed):
        want = post(args.http, "/embed", {"inputs": t, "model": args.embed})[0]
        close(got.embeddings, want, f"EmbedStream {t!r} (in order)")
    states = embed.EmbedAll(pb.EmbedAllRequest(inputs=texts[0]), metadata=model)
    want = post(args.http, "/embed_all", {"inputs": texts[0], "model": args.embed})[0]
    same([s.embeddings for s in states.token_embeddings], want, "EmbedAll")
    sparse = embed.EmbedSparse(pb.EmbedSparseRequest(inputs=texts[0]),
                               metadata=(("model", args.sparse),))
    want = post(args.http, "/embed_sparse", {"inputs": texts[0], "model": args.sparse})[0]
    assert [v.index for v in sparse.sparse_embeddings] == [w["index"] for w in want], "EmbedSparse"
    same([v.value for v in sparse.sparse_embeddings], [w["value"] for w in want], "EmbedSparse")
    expect(lambda: embed.Embed(pb.EmbedRequest(inputs=""), metadata=model),
           grpc.StatusCode.INVALID_ARGUMENT, "empty")
    expect(lambda: embed.Embed(pb.EmbedRequest(inputs="x")), grpc.StatusCode.INVALID_ARGUMENT,
           "several text models")
    expect(lambda: embed.Embed(pb.EmbedRequest(inputs="x"), metadata=(("model", "nope"),)),
           grpc.StatusCode.NOT_FOUND)
    # A stream ends at its first error, after the answers before it.
    bad = [pb.EmbedRequest(inputs="fine"), pb.EmbedRequest(inputs="")]
    answers = embed.EmbedStream(iter(bad), metadata=model)
    assert len(next(answers).embeddings) > 0
    expect(lambda: next(answers), grpc.StatusCode.INVALID_ARGUMENT)


def check_classify(pb, grpc_mod, channel, args):
    predict = grpc_mod.PredictStub(channel)
    model = (("model", args.classifier),)
    got = predict.Predict(pb.PredictRequest(inputs="a man is eating food ."), metadata=model)
    want = post(args.http, "/predict", {"inputs": "a man is eating food .", "model": args.classifier})
    assert [p.label for p in got.predictions] == [w["label"] for w in want], (got, want)
    same([p.score for p in got.predictions], [w["score"] for w in want], "Predict")
    pair = ["a man is eating", "someone eats"]
    got = predict.PredictPair(pb.PredictPairRequest(inputs=pair), metadata=model)
    want = post(args.http, "/predict", {"inputs": [pair], "model": args.classifier})[0]
    same([p.score for p in got.predictions], [w["score"] for w in want], "PredictPair")
    expect(lambda: predict.PredictPair(pb.PredictPairRequest(inputs=["one"]), metadata=model),
           grpc.StatusCode.INVALID_ARGUMENT, "pair")
    rerank = grpc_mod.RerankStub(channel)
    model = (("model", args.reranker),)
    texts = ["a man eats food", "a cat sleeps", "food is eaten by a man"]
    got = rerank.Rerank(pb.RerankRequest(query="a man is eating food .", texts=texts,
                                         return_text=True), metadata=model)
    want = post(args.http, "/rerank", {"query": "a man is eating food .", "texts": texts,
                                       "return_text": True, "model": args.reranker})
    assert [(r.index, r.text) for r in got.ranks] == [(w["index"], w["text"]) for w in want]
    same([r.score for r in got.ranks], [w["score"] for w in want], "Rerank")
    streamed = rerank.RerankStream(iter([
        pb.RerankStreamRequest(query="a man is eating food .", text=t) for t in texts
    ]), metadata=model)
    same([r.score for r in streamed.ranks], [w["score"] for w in want], "RerankStream")


def check_tokens(pb, grpc_mod, channel, args):
    tokenize = grpc_mod.TokenizeStub(channel)
    model = (("model", args.embed),)
    got = tokenize.Tokenize(pb.EncodeRequest(inputs="caf\u00e9 au lait", add_special_tokens=True),
                            metadata=model)
    want = post(args.http, "/tokenize", {"inputs": "caf\u00e9 au lait", "model": args.embed})[0]
    assert [(t.id, t.text, t.special) for t in got.tokens] == \
        [(w["id"], w["text"], w["special"]) for w in want], (got, want)
    ids = [t.id for t in got.tokens]
    text = tokenize.Decode(pb.DecodeRequest(ids=ids, skip_special_tokens=True), metadata=model)
    assert text.text == post(args.http, "/decode", {"ids": ids, "model": args.embed})[0], text
    expect(lambda: tokenize.Decode(pb.DecodeRequest(ids=[10**9]), metadata=model),
           grpc.StatusCode.INVALID_ARGUMENT, "vocabulary")


def check_info(pb, grpc_mod, channel, args):
    info = grpc_mod.InfoStub(channel)
    got = info.Info(pb.InfoRequest(), metadata=(("model", args.reranker),))
    assert got.model_id == args.reranker and got.model_type == pb.MODEL_TYPE_RERANKER, got
    assert got.max_input_length > 0 and got.max_client_batch_size > 0, got


def main():
    p = argparse.ArgumentParser()
    for flag in ("--grpc", "--http", "--proto", "--embed", "--sparse", "--classifier",
                 "--reranker"):
        p.add_argument(flag, required=True)
    args = p.parse_args()
    pb, grpc_mod = stubs(args.proto)
    channel = grpc.insecure_channel(args.grpc)
    check_info(pb, grpc_mod, channel, args)
    check_embed(pb, grpc_mod, channel, args)
    check_classify(pb, grpc_mod, channel, args)
    check_tokens(pb, grpc_mod, channel, args)
    print("all checks passed")


if __name__ == "__main__":
    main()
