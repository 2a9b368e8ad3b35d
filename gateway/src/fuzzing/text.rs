//! The text targets: embedding request bodies read and tokenized as the handlers do, and
//! texts through the tokenizer as every text endpoint hands them to it.

use models::{EncodeError, PackedTokens, TextTokenizer, Truncation};

use super::{ApiError, assert_client_error, fixtures};
use crate::http::cohere::{self, ApiVersion};
use crate::http::openai::OpenAiRequest;
use crate::http::tei::{self, PredictRequest, RerankRequest, TeiRequest, truncation};
use crate::infer::input::Input;
use crate::infer::tokenize;
use crate::protocol::json_de;

/// Tokenizes as `infer::tokenize` does, with the WordPiece tokenizer: a text too long (with
/// truncation off) is a 400; a tokenizer failure would be a 500, so there must be none.
pub(super) fn tokenize_all(texts: &[String], truncation: Truncation) -> PackedTokens {
    tokenize_with(&fixtures().tokenizer, texts, truncation)
}

/// The most tokens a character may give: WordPiece's lower-casing decomposes one into a
/// few; NFKC (the synthetic SentencePiece tokenizer's normaliser) expands one to at most 18
/// characters (U+FDFA), each a token, and a word's `▁` may be a token of its own.
fn tokens_per_char(tokenizer: &TextTokenizer) -> usize {
    if std::ptr::eq(tokenizer, &fixtures().sentencepiece) {
        2 * 18
    } else {
        3
    }
}

fn tokenize_with(
    tokenizer: &TextTokenizer,
    texts: &[String],
    truncation: Truncation,
) -> PackedTokens {
    let mut packed = PackedTokens::with_capacity(texts.len(), texts.len() * 16);
    for text in texts {
        match tokenizer.encode(text, truncation) {
            Ok(encoded) => {
                assert!(encoded.len() <= tokenizer.max_seq_len());
                assert_eq!(encoded.ids.len(), encoded.type_ids.len());
                assert!(encoded.full_len >= encoded.len());
                // The two special tokens at least; at most a few tokens per character.
                assert!(encoded.len() >= 2);
                let most = tokens_per_char(tokenizer) * text.chars().count() + 2;
                assert!(encoded.full_len <= most, "{encoded:?}");
                packed.push(&encoded);
            }
            Err(EncodeError::TooLong { tokens, max, .. }) => {
                assert!(
                    truncation == Truncation::Refuse && tokens > max,
                    "{tokens} > {max}, {truncation:?}"
                );
            }
            Err(EncodeError::Tokenizer(why)) => {
                panic!("the tokenizer failed on {text:?} (a 500): {why}")
            }
        }
    }
    packed
}

/// `POST /v1/embeddings`, `/embed`, `/predict`, `/rerank` and Cohere's `/v2/embed` and
/// `/v2/rerank` bodies (the same bytes as each), read with the handlers' own types and
/// checks (`http::openai`, `http::tei`, `http::cohere`), then tokenized and checked as the
/// core does (`infer::tokenize`): OpenAI's and Cohere's rerank truncating, TEI's
/// and Cohere's embed as the request says. A refused body must be a client error.
pub fn embeddings_json(data: &[u8]) {
    if let Ok(r) = json_de::from_slice::<OpenAiRequest>(data)
        && matches!(
            r.encoding_format.as_deref(),
            None | Some("float") | Some("base64")
        )
    {
        encode_inputs(r.input.checked("input"), Ok(Truncation::Right));
    }
    if let Ok(r) = json_de::from_slice::<TeiRequest>(data) {
        let truncation = truncation(r.truncate, r.truncation_direction.as_deref());
        encode_inputs(r.inputs.checked("inputs"), truncation);
    }
    if let Ok(r) = json_de::from_slice::<PredictRequest>(data) {
        let truncation = truncation(r.truncate, r.truncation_direction.as_deref());
        encode_inputs(tei::predict_inputs(r.inputs), truncation);
    }
    if let Ok(r) = json_de::from_slice::<RerankRequest>(data) {
        let truncation = truncation(r.truncate, r.truncation_direction.as_deref());
        encode_inputs(tei::rerank_inputs(&r), truncation);
    }
    cohere_json(data);
}

fn cohere_json(data: &[u8]) {
    if let Ok(r) = json_de::from_slice::<cohere::EmbedRequest>(data) {
        let kinds = cohere::kinds(r.embedding_types.as_deref(), ApiVersion::V2);
        if let Err(e) = kinds {
            assert_client_error(e);
        }
        let truncation = cohere::truncation(r.truncate.as_deref());
        encode_inputs(cohere::texts(&r), truncation);
    }
    if let Ok(r) = json_de::from_slice::<cohere::CohereRequest>(data) {
        encode_inputs(cohere::rerank_inputs(&r), Ok(Truncation::Right));
    }
}

fn encode_inputs(inputs: Result<Vec<Input>, ApiError>, truncation: Result<Truncation, ApiError>) {
    let f = fixtures();
    let (inputs, truncation) = match (inputs, truncation) {
        (Ok(inputs), Ok(t)) if inputs.len() <= f.settings.max_batch_size => (inputs, t),
        (Ok(_), Ok(_)) => return,
        (Err(e), _) | (_, Err(e)) => return assert_client_error(e),
    };
    let texts: Vec<String> = inputs
        .iter()
        .filter_map(|i| match i {
            Input::Text(t) => Some(t.clone()),
            Input::Ids(_) | Input::Pair(..) => None,
        })
        .collect();
    tokenize_all(&texts, truncation);
    pairs_fit(&inputs, truncation);
    match tokenize::encode_all(&f.tokenizer, &f.text, &inputs, truncation) {
        Ok(packed) => {
            assert_eq!(packed.sequences(), inputs.len());
            assert!(packed.lengths().all(|n| n >= 1 && n <= f.text.max_seq_len));
            assert!(
                packed
                    .ids
                    .iter()
                    .all(|&id| (id as usize) < f.text.vocab_size)
            );
        }
        Err(e) => assert_client_error(e),
    }
}

/// A pair cut to the limit keeps both its texts' special tokens and some of each, and is
/// refused only with truncation off.
fn pairs_fit(inputs: &[Input], truncation: Truncation) {
    let f = fixtures();
    for input in inputs {
        let Input::Pair(a, b) = input else {
            continue;
        };
        match f.tokenizer.encode_pair(a, b, truncation) {
            Ok(e) => {
                assert!(e.len() <= f.tokenizer.max_seq_len(), "{e:?}");
                assert_eq!(e.ids.len(), e.type_ids.len());
                assert!(e.type_ids.contains(&1), "a pair has a second text: {e:?}");
            }
            Err(EncodeError::TooLong { tokens, max, .. }) => {
                assert!(
                    truncation == Truncation::Refuse && tokens > max,
                    "{tokens} > {max}, {truncation:?}"
                );
            }
            Err(EncodeError::Tokenizer(why)) => panic!("the tokenizer failed on a pair: {why}"),
        }
    }
}

/// Text as any endpoint hands it to the tokenizer: the first byte's low bit says whether
/// to truncate, its next bit whether the WordPiece or the SentencePiece tokenizer takes it,
/// the third whether a cut keeps the end rather than the start; the rest is the text
/// (invalid UTF-8 replaced, as no endpoint passes it).
pub fn tokenize(data: &[u8]) {
    let Some((&mode, text)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(text);
    if text.is_empty() {
        return;
    }
    let f = fixtures();
    let tokenizer = match mode & 2 {
        0 => &f.tokenizer,
        _ => &f.sentencepiece,
    };
    let truncation = match (mode & 1, mode & 4) {
        (0, _) => Truncation::Refuse,
        (_, 0) => Truncation::Right,
        _ => Truncation::Left,
    };
    tokenize_with(tokenizer, &[text.as_ref().to_owned()], truncation);
    inspect(tokenizer, &text);
    cut_from_either_end(tokenizer, &text);
}

/// A text cut from either end keeps the tokens at that end of the whole text's, between
/// the special tokens. Read a piece at a time, from the start or from the end, the pieces
/// are cut at whitespace: that changes no token for WordPiece, which splits words at any
/// whitespace, so for it a long text is checked too, unless a word of it runs past half a
/// piece (then a piece may be cut within it).
fn cut_from_either_end(tokenizer: &TextTokenizer, text: &str) {
    let wordpiece = std::ptr::eq(tokenizer, &fixtures().tokenizer);
    let short_words = || {
        text.split(char::is_whitespace)
            .all(|word| word.len() < tokenizer.piece_bytes() / 2)
    };
    if text.len() > tokenizer.piece_bytes() && !(wordpiece && short_words()) {
        return;
    }
    let Ok(tokens) = tokenizer.tokens(text, false) else {
        return; // past the counting limit
    };
    let whole: Vec<u32> = tokens.iter().map(|t| t.id).collect();
    let (prefix, suffix) = tokenizer.special_ends();
    let room = tokenizer.max_seq_len() - prefix.len() - suffix.len();
    let keep = whole.len().min(room);
    for (truncation, kept) in [
        (Truncation::Right, &whole[..keep]),
        (Truncation::Left, &whole[whole.len() - keep..]),
    ] {
        let got = tokenizer
            .encode(text, truncation)
            .expect("a cut never refuses");
        let want = [prefix, kept, suffix].concat();
        assert_eq!(got.ids, want, "{truncation:?}: {text:?}");
    }
}

/// TEI's `/tokenize` and `/decode` on the same text: the tokens are the ids `encode` gives,
/// each covering bytes of the text, in order, and decoding never fails on them.
fn inspect(tokenizer: &TextTokenizer, text: &str) {
    let Ok(tokens) = tokenizer.tokens(text, true) else {
        return; // past the counting limit: a 400
    };
    let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
    if text.len() <= tokenizer.piece_bytes()
        && let Ok(encoded) = tokenizer.encode(text, false)
    {
        assert_eq!(ids, encoded.ids, "{text:?}");
    }
    let mut previous = 0;
    for t in tokens.iter().filter(|t| !t.special) {
        let (start, stop) = (t.start.unwrap_or(0), t.stop.unwrap_or(0));
        assert!(
            previous <= start && start <= stop && stop <= text.len(),
            "{t:?} in {text:?}"
        );
        previous = start;
    }
    tokenizer
        .decode(&ids, true)
        .expect("decoding the tokenizer's own ids");
}
