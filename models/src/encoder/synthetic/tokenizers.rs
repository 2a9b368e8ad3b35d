//! The synthetic folder's tokenizers: a BERT WordPiece over a small English vocabulary, and
//! an XLM-RoBERTa SentencePiece Unigram over the same words, as transformers saves them.

use std::collections::HashMap;

use serde_json::json;

/// Special tokens first (BERT's order of ids differs, which the tokenizer must not care
/// about), then whole words, then word pieces.
const SPECIALS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
const WORDS: &str = "a the man woman is are was eating eat food bread piece of and in on \
    to with for it this that cat dog runs run fast slow big small red blue green one two \
    three . , ! ? ' - ( ) 0 1 2 3 4 5 6 7 8 9 b c d e f g h i j k l m n o p q r s t u v w x y z";
const PIECES: &str = "##s ##ing ##ed ##er ##ly ##a ##b ##c ##d ##e ##f ##g ##h ##i ##j ##k ##l \
    ##m ##n ##o ##p ##q ##r ##s ##t ##u ##v ##w ##x ##y ##z ##0 ##1 ##2 ##3 ##4 ##5 ##6 ##7 \
    ##8 ##9";

/// The vocabulary, in id order (duplicates dropped).
pub(super) fn vocabulary() -> Vec<&'static str> {
    let mut seen = std::collections::HashSet::new();
    SPECIALS
        .iter()
        .copied()
        .chain(WORDS.split_whitespace())
        .chain(PIECES.split_whitespace())
        .filter(|t| seen.insert(*t))
        .collect()
}

/// XLM-RoBERTa's special tokens, in its order of ids; `<mask>` comes last.
const SENTENCEPIECE_SPECIALS: [&str; 4] = ["<s>", "<pad>", "</s>", "<unk>"];

/// A SentencePiece vocabulary with scores, in id order: the specials, each word with the
/// `▁` that marks a word's start (likelier than its letters), then every letter and digit
/// alone and after `▁`, so that any word of them has a tokenization.
pub(super) fn sentencepiece_vocabulary() -> Vec<(String, f64)> {
    let mut seen = std::collections::HashSet::new();
    let specials = SENTENCEPIECE_SPECIALS.iter().map(|t| (t.to_string(), 0.0));
    let words = WORDS
        .split_whitespace()
        .map(|w| (format!("\u{2581}{w}"), -2.0 - w.len() as f64 / 10.0));
    let letters = ('a'..='z')
        .chain('0'..='9')
        .flat_map(|c| [(c.to_string(), -6.0), (format!("\u{2581}{c}"), -7.0)]);
    specials
        .chain(words)
        .chain([("\u{2581}".to_string(), -4.0)])
        .chain(letters)
        .chain([("<mask>".to_string(), 0.0)])
        .filter(|(t, _)| seen.insert(t.clone()))
        .collect()
}

/// A BERT WordPiece tokenizer as transformers saves one (lower-casing, CJK split,
/// `[CLS] a [SEP] b [SEP]`), over `vocab`.
pub(super) fn tokenizer_json(vocab: &[&str]) -> serde_json::Value {
    let ids: HashMap<&str, usize> = vocab.iter().enumerate().map(|(i, t)| (*t, i)).collect();
    let added: Vec<_> = SPECIALS
        .iter()
        .map(|t| {
            json!({"id": ids[t], "content": t, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let special = |t: &str, type_id: u32| json!({"SpecialToken": {"id": t, "type_id": type_id}});
    let sequence = |s: &str, type_id: u32| json!({"Sequence": {"id": s, "type_id": type_id}});
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                       "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special("[CLS]", 0), sequence("A", 0), special("[SEP]", 0)],
            "pair": [special("[CLS]", 0), sequence("A", 0), special("[SEP]", 0),
                     sequence("B", 1), special("[SEP]", 1)],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [ids["[CLS]"]], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [ids["[SEP]"]], "tokens": ["[SEP]"]},
            },
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": ids},
    })
}

/// An XLM-RoBERTa tokenizer as transformers converts one from SentencePiece (NFKC standing
/// in for the model's own character map), over `vocab`: `<s> a </s>`, and `<s> a </s>
/// </s> b </s>` for a pair, all of token type 0.
pub(super) fn unigram_tokenizer_json(vocab: &[(String, f64)]) -> serde_json::Value {
    let id = |t: &str| {
        vocab
            .iter()
            .position(|(v, _)| v == t)
            .expect("a special token")
    };
    let added: Vec<_> = SENTENCEPIECE_SPECIALS
        .iter()
        .chain(&["<mask>"])
        .map(|t| {
            json!({"id": id(t), "content": t, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let special = |t: &str| json!({"SpecialToken": {"id": t, "type_id": 0}});
    let sequence = |s: &str| json!({"Sequence": {"id": s, "type_id": 0}});
    let metaspace = json!({"type": "Metaspace", "replacement": "\u{2581}",
                           "prepend_scheme": "always", "split": true});
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        ]},
        "pre_tokenizer": metaspace,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special("<s>"), sequence("A"), special("</s>")],
            "pair": [special("<s>"), sequence("A"), special("</s>"), special("</s>"),
                     sequence("B"), special("</s>")],
            "special_tokens": {
                "<s>": {"id": "<s>", "ids": [id("<s>")], "tokens": ["<s>"]},
                "</s>": {"id": "</s>", "ids": [id("</s>")], "tokens": ["</s>"]},
            },
        },
        "decoder": metaspace,
        "model": {"type": "Unigram", "unk_id": id("<unk>"), "byte_fallback": false,
                  "vocab": vocab},
    })
}
