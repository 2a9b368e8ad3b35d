//! A batch of token sequences packed end to end, with no padding: what the encoder runs.

use super::tokenizer::Encoded;

/// Sequences packed end to end: sequence `i` is `ids[offsets[i]..offsets[i + 1]]` (and the
/// same range of `type_ids`). `offsets` starts at 0 and has one entry more than there are
/// sequences.
///
/// Each sequence is answered with one pooled vector, or with its every token's state where
/// `states` says so (TEI's `/embed_all`): `states` is empty when no sequence is, else it
/// holds one entry per sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedTokens {
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
    pub offsets: Vec<usize>,
    pub states: Vec<bool>,
}

impl Default for PackedTokens {
    fn default() -> Self {
        PackedTokens {
            ids: Vec::new(),
            type_ids: Vec::new(),
            offsets: vec![0],
            states: Vec::new(),
        }
    }
}

impl PackedTokens {
    pub fn new() -> PackedTokens {
        PackedTokens::default()
    }

    /// Room for `sequences` sequences of `tokens` tokens in all.
    pub fn with_capacity(sequences: usize, tokens: usize) -> PackedTokens {
        let mut offsets = Vec::with_capacity(sequences + 1);
        offsets.push(0);
        PackedTokens {
            ids: Vec::with_capacity(tokens),
            type_ids: Vec::with_capacity(tokens),
            offsets,
            states: Vec::new(),
        }
    }

    /// The sequences `range` (of `0..sequences()`), packed on their own.
    pub fn sequences_in(&self, range: std::ops::Range<usize>) -> PackedTokens {
        let mut part = PackedTokens::new();
        self.copy_picked(range, &mut part);
        part
    }

    /// Replaces `into`'s sequences with the sequences `picked` of these, in that order, in
    /// its memory.
    pub fn copy_picked(&self, picked: impl IntoIterator<Item = usize>, into: &mut PackedTokens) {
        into.ids.clear();
        into.type_ids.clear();
        into.offsets.clear();
        into.offsets.push(0);
        into.states.clear();
        for i in picked {
            into.push_sequence_of(self, i);
        }
    }

    /// Appends sequence `i` of `other`, answered as it is there.
    pub fn push_sequence_of(&mut self, other: &PackedTokens, i: usize) {
        let range = other.range(i);
        self.push_ids(&other.ids[range.clone()], &other.type_ids[range]);
        if other.keeps_states(i) {
            // One entry per sequence from here on, this one's set.
            self.states.resize(self.sequences(), false);
            if let Some(last) = self.states.last_mut() {
                *last = true;
            }
        }
    }

    /// Answers every sequence with its every token's state instead of a pooled vector.
    pub fn keep_all_states(&mut self) {
        self.states.clear();
        self.states.resize(self.sequences(), true);
    }

    /// Whether sequence `i` is answered with every token's state.
    pub fn keeps_states(&self, i: usize) -> bool {
        self.states.get(i).copied().unwrap_or(false)
    }

    /// Whether any sequence is answered with every token's state.
    pub fn keeps_any_states(&self) -> bool {
        self.states.iter().any(|&k| k)
    }

    /// The rows of output sequence `i` gets: its length where it keeps its states, else 1.
    pub fn output_rows_of(&self, i: usize) -> usize {
        match self.keeps_states(i) {
            true => self.range(i).len(),
            false => 1,
        }
    }

    /// The rows of output the batch makes.
    pub fn output_rows(&self) -> usize {
        match self.states.is_empty() {
            true => self.sequences(),
            false => (0..self.sequences()).map(|i| self.output_rows_of(i)).sum(),
        }
    }

    /// Appends one tokenized input as the next sequence.
    pub fn push(&mut self, encoded: &Encoded) {
        self.push_ids(&encoded.ids, &encoded.type_ids);
    }

    /// Appends one sequence given as ids and type ids of the same length, pooled.
    ///
    /// # Panics
    /// If the lengths differ: a caller bug, not an input error.
    pub fn push_ids(&mut self, ids: &[u32], type_ids: &[u32]) {
        assert_eq!(
            ids.len(),
            type_ids.len(),
            "ids and type ids differ in length"
        );
        self.ids.extend_from_slice(ids);
        self.type_ids.extend_from_slice(type_ids);
        self.offsets.push(self.ids.len());
        if !self.states.is_empty() {
            self.states.push(false);
        }
    }

    /// Empties the batch, keeping its memory.
    pub fn clear(&mut self) {
        self.ids.clear();
        self.type_ids.clear();
        self.offsets.clear();
        self.offsets.push(0);
        self.states.clear();
    }

    /// Tokens in all sequences.
    pub fn tokens(&self) -> usize {
        self.ids.len()
    }

    pub fn sequences(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.sequences() == 0
    }

    /// The token range of sequence `i`.
    pub fn range(&self, i: usize) -> std::ops::Range<usize> {
        self.offsets[i]..self.offsets[i + 1]
    }

    /// Sequence lengths, in order.
    pub fn lengths(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.offsets.windows(2).map(|w| w[1] - w[0])
    }

    /// The sum of squared sequence lengths: what attention costs grow with.
    pub fn sum_squared_lengths(&self) -> u64 {
        self.lengths().map(|n| (n * n) as u64).sum()
    }

    /// The longest sequence, in tokens; 0 for an empty batch.
    pub fn max_len(&self) -> usize {
        self.lengths().max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_end_to_end_and_measures() {
        let mut p = PackedTokens::new();
        assert!(p.is_empty());
        assert_eq!((p.tokens(), p.sequences(), p.max_len()), (0, 0, 0));
        p.push_ids(&[101, 7, 102], &[0, 0, 0]);
        p.push(&Encoded {
            ids: vec![101, 102],
            type_ids: vec![0, 0],
            full_len: 2,
        });
        assert_eq!(p.offsets, vec![0, 3, 5]);
        assert_eq!((p.tokens(), p.sequences(), p.max_len()), (5, 2, 3));
        assert_eq!(p.range(1), 3..5);
        assert_eq!(p.sum_squared_lengths(), 13);
        p.clear();
        assert_eq!(p, PackedTokens::new());
    }

    #[test]
    fn states_kept_follow_their_sequences() {
        let mut pooled = PackedTokens::new();
        pooled.push_ids(&[101, 7, 102], &[0; 3]);
        let mut kept = PackedTokens::new();
        kept.push_ids(&[101, 8, 9, 102], &[0; 4]);
        kept.push_ids(&[101, 102], &[0; 2]);
        kept.keep_all_states();
        assert_eq!((pooled.output_rows(), kept.output_rows()), (1, 6));
        // Mixed in one batch: a pooled sequence, then two that keep their states.
        let mut batch = PackedTokens::new();
        batch.push_sequence_of(&pooled, 0);
        assert!(batch.states.is_empty());
        batch.push_sequence_of(&kept, 0);
        batch.push_sequence_of(&kept, 1);
        batch.push_ids(&[101, 102], &[0; 2]);
        assert_eq!(batch.states, vec![false, true, true, false]);
        assert_eq!(batch.output_rows(), 1 + 4 + 2 + 1);
        assert_eq!(batch.sequences_in(1..3), kept);
        assert!(batch.sequences_in(3..4).states.iter().all(|&k| !k));
        batch.clear();
        assert_eq!(batch, PackedTokens::new());
    }
}
