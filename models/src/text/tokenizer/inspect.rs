//! A text's tokens as a person reads them (TEI's `/tokenize`), and ids back to text (TEI's
//! `/decode`): for clients that send token ids and have no tokenizer of their own, and for
//! anyone asking why a text has the tokens it has.

use super::{EncodeError, TOKEN_COUNT_LIMIT, TextTokenizer, piece_end};

/// One token of a text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub id: u32,
    /// The text it stands for: its bytes of the input, or a special token's own form.
    pub text: String,
    pub special: bool,
    /// Its byte range in the input; `None` for a special token, which has none.
    pub start: Option<usize>,
    pub stop: Option<usize>,
}

impl TextTokenizer {
    /// Every token of `text`, with the model's special tokens around them when asked, and
    /// each one's byte range in `text`. Tokenized a piece at a time as [`Self::encode`]
    /// does, and refused past [`TOKEN_COUNT_LIMIT`] tokens.
    pub fn tokens(&self, text: &str, special_tokens: bool) -> Result<Vec<Token>, EncodeError> {
        let failed = |e: tokenizers::Error| EncodeError::Tokenizer(e.to_string());
        let mut tokens = Vec::new();
        if special_tokens {
            tokens.extend(self.prefix.iter().map(|&id| self.special(id)));
        }
        let (mut offset, mut rest) = (0, text);
        while !rest.is_empty() {
            let (piece, after) = rest.split_at(piece_end(rest, self.piece_bytes()));
            let encoding = self.whole.encode(piece, false).map_err(failed)?;
            for (&id, &(start, stop)) in encoding.get_ids().iter().zip(encoding.get_offsets()) {
                let (start, stop) = (offset + start, offset + stop);
                tokens.push(Token {
                    id,
                    // Offsets come from the folder's tokenizer: out of range, they cover nothing.
                    text: String::from_utf8_lossy(text.as_bytes().get(start..stop).unwrap_or(&[]))
                        .into_owned(),
                    special: false,
                    start: Some(start),
                    stop: Some(stop),
                });
            }
            if tokens.len() > TOKEN_COUNT_LIMIT {
                return Err(EncodeError::TooLong {
                    tokens: TOKEN_COUNT_LIMIT,
                    max: TOKEN_COUNT_LIMIT,
                    counted_all: false,
                });
            }
            (offset, rest) = (offset + piece.len(), after);
        }
        if special_tokens {
            tokens.extend(self.suffix.iter().map(|&id| self.special(id)));
        }
        Ok(tokens)
    }

    /// The text of `ids`, with or without the special tokens among them.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, EncodeError> {
        self.whole
            .decode(ids, skip_special_tokens)
            .map_err(|e| EncodeError::Tokenizer(e.to_string()))
    }

    fn special(&self, id: u32) -> Token {
        Token {
            id,
            text: self.whole.id_to_token(id).unwrap_or_default(),
            special: true,
            start: None,
            stop: None,
        }
    }
}
