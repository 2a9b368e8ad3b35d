//! The longest text a model serves, as its folder says: `sentence_bert_config.json`'s
//! `max_seq_length`, else `tokenizer_config.json`'s `model_max_length`, else BERT's 512.

use std::path::Path;

use serde::Deserialize;

use super::read_json;
use crate::LoadError;

#[derive(Deserialize)]
struct SentenceJson {
    max_seq_length: Option<usize>,
}

/// BERT's own limit when `sentence_bert_config.json` gives none.
const DEFAULT_MAX_SEQ_LEN: usize = 512;

/// The limit in tokens, special ones included, before the position table caps it.
pub(super) fn read_max_seq_len(dir: &Path) -> Result<usize, LoadError> {
    Ok(given_max_seq_len(dir)?.unwrap_or(DEFAULT_MAX_SEQ_LEN))
}

/// The limit the folder's files give, if any.
pub(crate) fn given_max_seq_len(dir: &Path) -> Result<Option<usize>, LoadError> {
    let path = dir.join("sentence_bert_config.json");
    let given = match path.is_file() {
        true => read_json::<SentenceJson>(&path)?.max_seq_length,
        false => None,
    };
    match given {
        Some(0) => Err(LoadError::Config {
            path,
            reason: "max_seq_length is 0, expected at least 1".into(),
        }),
        Some(n) => Ok(Some(n)),
        None => tokenizer_max_length(dir),
    }
}

/// `tokenizer_config.json`'s `model_max_length`, where sentence-transformers 6 keeps the
/// limit it saves (its `sentence_bert_config.json` no longer has `max_seq_length`); None
/// where it is absent or transformers' "no limit" (1e30).
fn tokenizer_max_length(dir: &Path) -> Result<Option<usize>, LoadError> {
    let path = dir.join("tokenizer_config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let config: serde_json::Value = read_json(&path)?;
    Ok(config["model_max_length"]
        .as_f64()
        .filter(|&n| n >= 1.0 && n <= (1u64 << 20) as f64)
        .map(|n| n as usize))
}
