//! What a text model takes, whichever API or protocol it came through: texts, pairs of
//! texts, and token ids made by the model's own tokenizer, bounded as they are read.

/// The most inputs one request may hold, as OpenAI allows; a model's `max_batch_size` may
/// allow fewer.
pub const MAX_TEXTS: usize = 2048;

/// The most token ids of one input kept: past it they are only counted, as a text's tokens
/// are.
pub const MAX_IDS: usize = models::encoder::TOKEN_COUNT_LIMIT;

/// Token ids a client made with the model's own tokenizer, special tokens included.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TokenIds {
    /// The first [`MAX_IDS`] of them.
    pub ids: Vec<u32>,
    /// How many the request held.
    pub count: usize,
    /// The last of them, kept or not.
    pub last: Option<u32>,
}

impl TokenIds {
    /// One more id: kept while fewer than [`MAX_IDS`] are, counted always.
    pub fn push(&mut self, id: u32) {
        self.count += 1;
        self.last = Some(id);
        if self.ids.len() < MAX_IDS {
            self.ids.push(id);
        }
    }

    /// Whether they end with `suffix`: in full where every id was kept, by the last id
    /// otherwise.
    pub fn ends_with(&self, suffix: &[u32]) -> bool {
        if self.count == self.ids.len() {
            self.ids.ends_with(suffix)
        } else {
            suffix.last().is_none_or(|&s| self.last == Some(s))
        }
    }
}

/// One input of a text model.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Text(String),
    Ids(TokenIds),
    /// Two texts as one sequence (`[CLS] a [SEP] b [SEP]`), as a cross-encoder scores a
    /// query and a passage; built by the classification endpoints, never parsed here. The
    /// pairs of one query share it.
    Pair(std::sync::Arc<str>, String),
}

impl Input {
    /// The characters of its text (both texts of a pair); none for token ids.
    pub fn chars(&self) -> usize {
        match self {
            Input::Text(t) => t.chars().count(),
            Input::Ids(_) => 0,
            Input::Pair(a, b) => a.chars().count() + b.chars().count(),
        }
    }
}
