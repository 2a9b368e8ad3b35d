//! Text to token ids, with the folder's own `tokenizer.json` through the `tokenizers` crate
//! (the library Python's `tokenizers` wraps, so the ids are the same).
//!
//! The file's padding and truncation settings are replaced: batches are packed, never
//! padded, and the limit is the model's `max_seq_length`, not whatever the file was saved
//! with. An input is either truncated to the limit (longest first, for pairs, as
//! sentence-transformers does), keeping its start or its end as the caller asks
//! ([`Truncation`]), or, when the caller asks not to truncate, refused with its token
//! count — never silently cut.

mod inspect;
mod pieces;

use std::fmt;
use std::path::Path;

use tokenizers::{PostProcessor, Tokenizer, TruncationDirection};

pub use inspect::Token;

use crate::LoadError;
use crate::folder::required;
use pieces::{piece_end, piece_start};

/// One tokenized input: ids and token type ids (0 for the first text, 1 for the second of
/// a pair), special tokens included.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Encoded {
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
    /// The length before truncation; `ids.len()` when nothing was cut. A text longer than
    /// [`TextTokenizer::piece_bytes`] is counted only as far as its answer needs: in full
    /// when it fits, up to [`TOKEN_COUNT_LIMIT`] when it is refused, and just past the limit when
    /// it is truncated. Each text of a pair is counted up to [`TOKEN_COUNT_LIMIT`].
    pub full_len: usize,
}

impl Encoded {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn truncated(&self) -> bool {
        self.full_len > self.ids.len()
    }
}

/// What to do with an input longer than the model takes. The directions are named as the
/// `tokenizers` library and TEI name them: the side that is cut off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Truncation {
    /// Refuse it with its token count ([`EncodeError::TooLong`]).
    Refuse,
    /// Cut its end off: keep the start.
    Right,
    /// Cut its start off: keep the end (the latest turns of a conversation, say).
    Left,
}

impl Truncation {
    fn direction(self) -> TruncationDirection {
        match self {
            Truncation::Left => TruncationDirection::Left,
            Truncation::Refuse | Truncation::Right => TruncationDirection::Right,
        }
    }
}

/// `true` cuts the end off, as sentence-transformers does; `false` refuses.
impl From<bool> for Truncation {
    fn from(truncate: bool) -> Truncation {
        if truncate {
            Truncation::Right
        } else {
            Truncation::Refuse
        }
    }
}

/// Why a text could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// Longer than the model takes, and the caller asked not to truncate. `counted_all` is
    /// false when the text ran past [`TOKEN_COUNT_LIMIT`] tokens, where counting stopped.
    TooLong {
        tokens: usize,
        max: usize,
        counted_all: bool,
    },
    /// The tokenizer itself failed (a vocabulary without its unknown token, say): a fault
    /// of the model folder rather than of the text.
    Tokenizer(String),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::TooLong {
                tokens,
                max,
                counted_all,
            } => {
                let more = if *counted_all { "" } else { "more than " };
                write!(f, "the input has {more}{tokens} tokens, at most {max} fit")
            }
            EncodeError::Tokenizer(reason) => write!(f, "tokenization failed: {reason}"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// A model's tokenizer with tandem's settings. Shared between threads: encoding takes
/// `&self`.
pub struct TextTokenizer {
    /// No truncation: inputs are cut here, not by the library (see `encode_in_pieces`).
    whole: Tokenizer,
    max_seq_len: usize,
    /// The ids the tokenizer puts before and after one text's: `[CLS]` and `[SEP]` for BERT.
    prefix: Vec<u32>,
    suffix: Vec<u32>,
}

/// The fewest tokens a limit may allow beside a pair's special tokens: one of each text.
const MIN_PAIR_ROOM: usize = 2;

/// How far an over-long text is counted for its refusal: past this, the message says "more
/// than". Tokenizing costs microseconds a token, so a 16 MiB text counted in full would
/// hold a core for seconds only to be refused.
pub const TOKEN_COUNT_LIMIT: usize = 16_384;

impl TextTokenizer {
    /// Reads `dir/tokenizer.json` and sets it up for sequences of at most `max_seq_len`
    /// tokens, special tokens included.
    pub fn from_dir(dir: &Path, max_seq_len: usize) -> Result<TextTokenizer, LoadError> {
        let path = required(dir, "tokenizer.json")?;
        let invalid = |reason: String| LoadError::Tokenizer {
            path: path.clone(),
            reason,
        };
        let mut whole = Tokenizer::from_file(&path).map_err(|e| invalid(e.to_string()))?;
        whole.with_padding(None);
        whole
            .with_truncation(None)
            .map_err(|e| invalid(e.to_string()))?;
        let (prefix, suffix) = special_ends(&whole).map_err(|e| invalid(e.to_string()))?;
        let pair_specials = whole
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(true));
        if pair_specials + MIN_PAIR_ROOM > max_seq_len {
            return Err(invalid(format!(
                "a limit of {max_seq_len} tokens leaves no room for a pair of texts beside the \
                 {pair_specials} special tokens the tokenizer adds to a pair"
            )));
        }
        let tokenizer = TextTokenizer {
            whole,
            max_seq_len,
            prefix,
            suffix,
        };
        // A tokenizer that cannot encode plain text is a broken folder: say so at load.
        tokenizer
            .encode_pair("tandem checks its tokenizer", "[?]", true)
            .map_err(|e| invalid(e.to_string()))?;
        Ok(tokenizer)
    }

    pub fn max_seq_len(&self) -> usize {
        self.max_seq_len
    }

    /// The ids it puts before and after one text's tokens (`[CLS]` and `[SEP]` for BERT;
    /// none for a tokenizer without special tokens).
    pub fn special_ends(&self) -> (&[u32], &[u32]) {
        (&self.prefix, &self.suffix)
    }

    /// One past the largest id the tokenizer can give, added tokens included: the model's
    /// vocabulary must be at least this large.
    pub fn ids_below(&self) -> usize {
        self.whole
            .get_vocab(true)
            .values()
            .max()
            .map_or(0, |&id| id as usize + 1)
    }

    /// One past the largest token type id a pair is given: 2 for BERT's tokenizer (the
    /// second text's 1), 1 for RoBERTa's (all 0).
    pub fn pair_type_ids_below(&self) -> usize {
        self.encode_pair("a", "b", true)
            .ok()
            .and_then(|e| e.type_ids.iter().max().copied())
            .map_or(0, |t| t as usize + 1)
    }

    /// One text, with the model's special tokens. An input longer than
    /// [`TextTokenizer::max_seq_len`] is cut as `truncation` says, or refused with
    /// [`EncodeError::TooLong`].
    pub fn encode(
        &self,
        text: &str,
        truncation: impl Into<Truncation>,
    ) -> Result<Encoded, EncodeError> {
        let truncation = truncation.into();
        if text.len() <= self.piece_bytes() {
            // Most texts fit: one pass gives their ids.
            let whole = self.whole.encode_fast(text, true).map_err(failed)?;
            if whole.len() <= self.max_seq_len {
                return Ok(Encoded::of(&whole, whole.len()));
            }
        }
        self.encode_in_pieces(text, truncation)
    }

    /// Texts longer than this many bytes are tokenized a piece of about this size at a
    /// time, and only as far as their answer needs.
    pub fn piece_bytes(&self) -> usize {
        (self.max_seq_len * 8).max(1024)
    }

    /// A text that does not fit, or a long one, a piece at a time, each cut where the
    /// tokenizer splits words anyway (see [`pieces`]), so the pieces' tokens run on as the
    /// whole text's would; cut here as the library would cut it. Tokenizing all of a long
    /// text at once would hold every token with its offsets (about
    /// 100 bytes each) and take microseconds a token, when a truncated answer needs only
    /// the first `max_seq_len` (or the last, when cutting from the left: then the pieces
    /// are read from the end).
    fn encode_in_pieces(&self, text: &str, truncation: Truncation) -> Result<Encoded, EncodeError> {
        let specials = self.specials(false);
        let room = self.max_seq_len.saturating_sub(specials);
        let enough = match truncation {
            Truncation::Refuse => TOKEN_COUNT_LIMIT.max(room + 1),
            Truncation::Right | Truncation::Left => room + 1,
        };
        let mut bare = self.bare(text, room, enough, truncation.direction())?;
        let full_len = bare.count + specials;
        if bare.count > room {
            if truncation == Truncation::Refuse {
                return Err(EncodeError::TooLong {
                    tokens: full_len,
                    max: self.max_seq_len,
                    counted_all: bare.counted_all,
                });
            }
            bare.encoding.truncate(room, 0, truncation.direction());
            drop(bare.encoding.take_overflowing());
        }
        let encoding = (self.whole)
            .post_process(bare.encoding, None, true)
            .map_err(failed)?;
        Ok(Encoded::of(&encoding, full_len))
    }

    /// How many special tokens it adds to one text, or to a pair.
    fn specials(&self, pair: bool) -> usize {
        self.whole
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(pair))
    }

    /// A text's own tokens (no special tokens), a piece at a time from the end a cut on
    /// `side` keeps (the start for `Right`, the end for `Left`), counted until there are `enough`
    /// and kept only until there are more than `room`: what a cut needs, where a refusal
    /// needs only the count. A text within [`TextTokenizer::piece_bytes`] is one piece,
    /// counted in full.
    fn bare(
        &self,
        text: &str,
        room: usize,
        enough: usize,
        side: TruncationDirection,
    ) -> Result<Bare, EncodeError> {
        let mut encodings = Vec::new();
        let (mut count, mut rest) = (0, text);
        while !rest.is_empty() && count < enough {
            let (piece, others) = match side {
                TruncationDirection::Right => rest.split_at(piece_end(rest, self.piece_bytes())),
                TruncationDirection::Left => {
                    let (before, piece) = rest.split_at(piece_start(rest, self.piece_bytes()));
                    (piece, before)
                }
            };
            let encoding = self.whole.encode_fast(piece, false).map_err(failed)?;
            let tokens = encoding.len();
            if count <= room {
                encodings.push(encoding);
            }
            count += tokens;
            rest = others;
        }
        if side == TruncationDirection::Left {
            encodings.reverse();
        }
        Ok(Bare {
            encoding: tokenizers::Encoding::merge(encodings, false),
            count,
            counted_all: rest.is_empty(),
        })
    }

    /// A pair of texts (a query and a passage, say), as one sequence: `[CLS] a [SEP] b
    /// [SEP]` for BERT, with type ids 0 then 1. Truncation shortens the longer text first,
    /// as the `tokenizers` library's longest-first strategy does. Each text is tokenized
    /// a piece at a time and counted up to [`TOKEN_COUNT_LIMIT`] (the cut depends on both
    /// lengths), and cut here rather than by the library, whose pair truncation keeps every
    /// combination of the two texts' overflowing parts: memory growing with the product of
    /// their lengths.
    pub fn encode_pair(
        &self,
        a: &str,
        b: &str,
        truncation: impl Into<Truncation>,
    ) -> Result<Encoded, EncodeError> {
        let truncation = truncation.into();
        let (a, b) = (
            self.pair_part(a, truncation)?,
            self.pair_part(b, truncation)?,
        );
        self.encode_parts(&a, &b)
    }

    /// One text of a pair, tokenized as far as any pair holding it needs, from the end
    /// `truncation` keeps: so that a query paired with many passages is tokenized once
    /// ([`TextTokenizer::encode_parts`]).
    pub fn pair_part(
        &self,
        text: &str,
        truncation: impl Into<Truncation>,
    ) -> Result<PairPart, EncodeError> {
        let truncation = truncation.into();
        let side = truncation.direction();
        let room = self.max_seq_len.saturating_sub(self.specials(true));
        let mut bare = self.bare(text, room, TOKEN_COUNT_LIMIT.max(room + 1), side)?;
        // No cut keeps more than the room, and a query's part is copied for every pair.
        bare.encoding.truncate(room, 0, side);
        drop(bare.encoding.take_overflowing());
        Ok(PairPart { bare, truncation })
    }

    /// The pair of `a` and `b`, as [`TextTokenizer::encode_pair`] gives it: refused or cut
    /// as the first part's `truncation` says, each part cut from the side it was read for.
    pub fn encode_parts(&self, a: &PairPart, b: &PairPart) -> Result<Encoded, EncodeError> {
        let specials = self.specials(true);
        let room = self.max_seq_len.saturating_sub(specials);
        let (count_a, count_b) = (a.bare.count, b.bare.count);
        let full_len = count_a + count_b + specials;
        let (a, mut b) = if count_a + count_b <= room {
            (a.bare.encoding.clone(), b.bare.encoding.clone())
        } else if a.truncation == Truncation::Refuse {
            return Err(EncodeError::TooLong {
                tokens: full_len,
                max: self.max_seq_len,
                counted_all: a.bare.counted_all && b.bare.counted_all,
            });
        } else {
            let (keep_a, keep_b) = longest_first(count_a, count_b, room);
            (a.cut_to(keep_a), b.cut_to(keep_b))
        };
        // The library tokenizes the second text with type id 1: a post-processor sets type
        // ids again, but without one these stand.
        b.set_type_ids(vec![1; b.len()]);
        let encoding = (self.whole)
            .post_process(a, Some(b), true)
            .map_err(failed)?;
        Ok(Encoded::of(&encoding, full_len))
    }
}

/// One text of a pair, tokenized: see [`TextTokenizer::pair_part`].
#[derive(Clone, Debug)]
pub struct PairPart {
    bare: Bare,
    /// What it was read for: a part cut from the left holds the text's last tokens.
    truncation: Truncation,
}

impl PairPart {
    /// Its first or last `keep` tokens, as it was read for.
    fn cut_to(&self, keep: usize) -> tokenizers::Encoding {
        let mut encoding = self.bare.encoding.clone();
        encoding.truncate(keep, 0, self.truncation.direction());
        drop(encoding.take_overflowing());
        encoding
    }
}

/// A text's own tokens, and how many it has as far as they were counted.
#[derive(Clone, Debug)]
struct Bare {
    encoding: tokenizers::Encoding,
    count: usize,
    /// Whether `count` is all of them.
    counted_all: bool,
}

impl Encoded {
    fn of(encoding: &tokenizers::Encoding, full_len: usize) -> Encoded {
        Encoded {
            ids: encoding.get_ids().to_vec(),
            type_ids: encoding.get_type_ids().to_vec(),
            full_len,
        }
    }
}

fn failed(e: tokenizers::Error) -> EncodeError {
    EncodeError::Tokenizer(e.to_string())
}

/// How many tokens of a pair of texts of `a` and `b` tokens to keep within `room`, as the
/// `tokenizers` library's longest-first truncation keeps them: the shorter whole and the
/// longer cut to what is left when the shorter fits in half, both cut to half otherwise
/// (the longer keeping the odd one).
fn longest_first(a: usize, b: usize, room: usize) -> (usize, usize) {
    let short = a.min(b);
    let (mut keep_short, mut keep_long) = if short > room {
        (short, short)
    } else {
        (short, short.max(room - short))
    };
    if keep_short + keep_long > room {
        keep_short = room / 2;
        keep_long = keep_short + room % 2;
    }
    if a > b {
        (keep_long, keep_short)
    } else {
        (keep_short, keep_long)
    }
}

/// The ids around a text's own, read off one encoding with special tokens and one without.
fn special_ends(tokenizer: &Tokenizer) -> tokenizers::Result<(Vec<u32>, Vec<u32>)> {
    let with = tokenizer.encode_fast("a", true)?.get_ids().to_vec();
    let text = tokenizer.encode_fast("a", false)?.get_ids().to_vec();
    let start = (!text.is_empty())
        .then(|| with.windows(text.len()).position(|w| w == text.as_slice()))
        .flatten();
    Ok(match start {
        Some(s) => (with[..s].to_vec(), with[s + text.len()..].to_vec()),
        None => (Vec::new(), Vec::new()),
    })
}

impl fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("max_seq_len", &self.max_seq_len)
            .finish_non_exhaustive()
    }
}

/// The gateway tokenizes on several threads at once through one shared tokenizer.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<TextTokenizer>();
};

#[cfg(test)]
mod tests {
    use super::longest_first;

    /// The cases of the `tokenizers` library's longest-first truncation of a pair.
    #[test]
    fn longest_first_keeps_what_the_tokenizers_library_keeps() {
        // The shorter fits in half the room: kept whole, the longer cut to the rest.
        assert_eq!(longest_first(10, 100, 45), (10, 35));
        assert_eq!(longest_first(100, 10, 45), (35, 10));
        // Both longer than half: both cut to half, the longer keeping the odd token.
        assert_eq!(longest_first(30, 100, 45), (22, 23));
        assert_eq!(longest_first(100, 30, 45), (23, 22));
        // Equal lengths: the second keeps it, as the library does without a swap.
        assert_eq!(longest_first(50, 50, 45), (22, 23));
        // One longer than the whole room.
        assert_eq!(longest_first(60, 50, 45), (23, 22));
        assert_eq!(longest_first(23, 23, 45), (22, 23));
        assert_eq!(longest_first(1, 1000, 2), (1, 1));
    }
}
