"""Builds small decoder embedders with transformers and sentence-transformers, and what
those libraries answer for them: the fixtures of tandem's decoder tests.

    python tests/python/make_decoder_models.py DIR

needs torch, transformers, sentence-transformers and tokenizers (scripts/test.sh does not:
the folders and their answers are checked in under tests/fixtures/decoders, and
`cargo test -- --ignored decoder_fixtures_regenerate` runs this script again with
TANDEM_TORCH_PYTHON and compares). Everything is seeded: the same versions of the
libraries write the same files.

Each DIR/<name>/ is a sentence-transformers folder (config.json, model.safetensors,
tokenizer.json, modules.json, the Pooling and Normalize modules,
config_sentence_transformers.json with prompts) and expected.json:

  {"cases": [{"text": ..., "prompt_name": null | "query", "ids": [...],
              "embedding": [...]}, ...]}

where `ids` are the tokens of the prompt and text together, as the model reads them, and
`embedding` is SentenceTransformer.encode's (cut at max_seq_length as it cuts), normalised, in float32, one text at a time
(no padding).

Models:
  qwen3   Qwen3 (q/k RMSNorm per head, head_dim 16 with hidden 32: the attention wider
          than the residual stream, as in Qwen3-Embedding), 4 query heads over 2 key/value
          heads, last-token pooling, causal
  qwen2   Qwen2 (q/k/v biases), head_dim = hidden / heads, 4 query heads over 2 key/value
          heads, last-token pooling, causal
  gemma3  Gemma3's text model as EmbeddingGemma has it: both ways, sliding-window layers
          with a rotary base of their own, norms around each block, GELU-tanh, embeddings
          scaled by sqrt(hidden), the beginning of text before each, mean pooling, two
          Dense modules, EmbeddingGemma's prompts
"""

import json
import os
import sys

import torch
from sentence_transformers import SentenceTransformer, models
from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors, trainers
from tokenizers.models import BPE
from transformers import (
    Gemma3TextConfig, Gemma3TextModel, PreTrainedTokenizerFast, Qwen2Config, Qwen2Model,
    Qwen3Config, Qwen3Model,
)

EOS = "<|endoftext|>"
BOS = "<bos>"
SPECIALS = [EOS, "<|im_start|>", "<|im_end|>", BOS]
PROMPTS = {
    "query": "Instruct: Given a question, retrieve passages that answer it\nQuery:",
    "document": "",
}
# EmbeddingGemma's form of prompts.
GEMMA_PROMPTS = {
    "query": "task: search result | query: ",
    "document": "title: none | text: ",
}
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Training fills the leftover capacity; serving never pays for it.",
    "A p99 latency budget is met by batching adaptively.",
    "Qwen3 embeddings pool the last token, which is the end of text.",
    "Where is the nearest train station? How much does a ticket cost?",
    "Les modèles d'embedding servent la recherche sémantique.",
    "Größere Modelle brauchen mehr Speicher, kleinere weniger.",
    "数字和文字都被编码成字节，再合并成词元。",
    "def forward(self, x): return self.proj(x) + x",
    "Instruct: Given a question, retrieve passages that answer it",
]
# About 280 tokens: attention over several blocks of keys. LONG is past the 512 of
# max_seq_length: cut to its first 511 tokens and the end of text.
MID = " ".join(CORPUS)
LONG = " ".join(CORPUS * 3)
CASES = [
    ("What is the capital of France?", "query"),
    ("Paris is the capital and largest city of France.", None),
    ("Größere Modelle brauchen mehr Speicher.", None),
    ("数字和文字", "query"),
    ("a", None),
    ("", None),
    (MID, None),
    (MID, "query"),
    (LONG, None),
]


def tokenizer(vocab_size, bos=None):
    tok = Tokenizer(BPE(unk_token=None))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    specials = [(EOS, tok.token_to_id(EOS))]
    # Qwen3-Embedding's: the end of text after every text, which last-token pooling reads;
    # EmbeddingGemma's: the beginning of text before it too.
    start = ""
    if bos:
        specials.append((bos, tok.token_to_id(bos)))
        start = f"{bos}:0 "
    tok.post_processor = processors.TemplateProcessing(
        single=f"{start}$A:0 {EOS}:0",
        pair=f"{start}$A:0 {EOS}:0 $B:1 {EOS}:1",
        special_tokens=specials,
    )
    return tok


def randomise(model, seed):
    """Weights far from transformers' small initial ones, so that every part matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.2 * noise)
            else:
                p.copy_(0.25 * noise)


def build(out, name, config_class, model_class, seed, form, **sizes):
    """`form`: "bos" (the token before each text, if any), "pooling", "dense" (the Dense
    modules' (in, out) sizes), "prompts"."""
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    raw = tokenizer(400, form.get("bos"))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token=EOS, pad_token=EOS, model_max_length=512
    )
    fast.padding_side = "left"
    config = config_class(
        vocab_size=raw.get_vocab_size(),
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        **sizes,
    )
    torch.manual_seed(seed)
    model = model_class(config).eval()
    randomise(model, seed)
    # sentence-transformers' Transformer module reads the folder transformers wrote.
    model.save_pretrained(folder, safe_serialization=True)
    fast.save_pretrained(folder)
    modules = [models.Transformer(folder, max_seq_length=512)]
    modules.append(models.Pooling(config.hidden_size, pooling_mode=form["pooling"]))
    for i, (inputs, outputs) in enumerate(form.get("dense", [])):
        torch.manual_seed(seed + 100 + i)
        modules.append(models.Dense(inputs, outputs, bias=False,
                                    activation_function=torch.nn.Identity()))
    modules.append(models.Normalize())
    prompts = form["prompts"]
    st = SentenceTransformer(modules=modules, prompts=prompts)
    st.save(folder)
    # Read back what was written, so the answers are those of the folder as served.
    st = SentenceTransformer(folder, device="cpu")
    cases = []
    for text, prompt_name in CASES:
        prompt = prompts[prompt_name] if prompt_name else ""
        ids = st.preprocess([prompt + text])["input_ids"][0].tolist()
        embedding = st.encode([text], prompt_name=prompt_name, convert_to_numpy=True)[0]
        cases.append(
            {"text": text, "prompt_name": prompt_name, "ids": ids,
             "embedding": [float(v) for v in embedding]}
        )
    os.remove(os.path.join(folder, "README.md"))
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump({"cases": cases}, f)


QWEN = {"pooling": "lasttoken", "prompts": PROMPTS}
# EmbeddingGemma's: the beginning of text, mean pooling, two Dense modules out and back.
GEMMA = {"bos": BOS, "pooling": "mean", "dense": [(32, 64), (64, 32)], "prompts": GEMMA_PROMPTS}


def main():
    out = sys.argv[1]
    torch.use_deterministic_algorithms(True)
    build(out, "qwen3", Qwen3Config, Qwen3Model, 3, QWEN,
          hidden_size=32, intermediate_size=64, num_hidden_layers=2,
          num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    build(out, "qwen2", Qwen2Config, Qwen2Model, 2, QWEN,
          hidden_size=32, intermediate_size=64, num_hidden_layers=2,
          num_attention_heads=4, num_key_value_heads=2)
    # A window of 16 in two layers of three, both ways (transformers halves it: a query sees
    # 8 positions either way); the other layer attends to the whole text.
    build(out, "gemma3", Gemma3TextConfig, Gemma3TextModel, 5, GEMMA,
          hidden_size=32, intermediate_size=64, num_hidden_layers=3,
          num_attention_heads=4, num_key_value_heads=1, head_dim=16,
          query_pre_attn_scalar=12, sliding_window=16, use_bidirectional_attention=True,
          layer_types=["sliding_attention", "full_attention", "sliding_attention"],
          rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                           "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})


if __name__ == "__main__":
    main()
