//! Batches of several sequences on several threads: a group of whole sequences per thread,
//! each group's layers run on its own thread, where the sequences divide evenly. Layers
//! split over the threads wait for each other at every layer and read what the other
//! thread wrote; a group does neither. Both CPU encoders run their batches this way when
//! they can, and split each layer otherwise (one long sequence, or a few uneven ones).

use std::ops::Range;

use rayon::prelude::*;

use super::packed::PackedTokens;
use crate::ModelError;

/// A group of sequences and the state its forward pass runs in.
#[derive(Default)]
pub(super) struct Group<S> {
    tokens: PackedTokens,
    state: S,
}

/// A batch to run in groups, if it divides evenly.
pub(super) struct Grouped<'a> {
    pub(super) tokens: &'a PackedTokens,
    pub(super) threads: usize,
    /// What one pair of tokens costs in attention, against a token's dense layers (1).
    pub(super) pair_cost: f64,
    /// Output values per sequence.
    pub(super) width: usize,
}

/// A forward pass: of these tokens, in this state, into these rows, on up to this many
/// threads.
pub(super) type Forward<'f, S> =
    &'f (dyn Fn(&PackedTokens, &mut S, &mut [f32], usize) -> Result<(), ModelError> + Sync);

impl Grouped<'_> {
    /// Runs `forward` on each group, on its own thread, in the state `groups` keeps for it
    /// and on its rows of `output`; or where the batch does not divide evenly over the
    /// threads, once over the whole batch in `whole` with every thread.
    pub(super) fn run<S: Default + Send>(
        &self,
        groups: &mut Vec<Group<S>>,
        whole: &mut S,
        output: &mut [f32],
        forward: Forward<'_, S>,
    ) -> Result<(), ModelError> {
        match self.in_groups(groups, output, forward) {
            Some(result) => result,
            None => forward(self.tokens, whole, output, self.threads),
        }
    }

    fn in_groups<S: Default + Send>(
        &self,
        groups: &mut Vec<Group<S>>,
        output: &mut [f32],
        forward: Forward<'_, S>,
    ) -> Option<Result<(), ModelError>> {
        let ranges = sequence_groups(self.tokens, self.threads, self.pair_cost)?;
        groups.resize_with(ranges.len(), Group::default);
        let mut outputs = Vec::with_capacity(ranges.len());
        let mut rest = output;
        for range in &ranges {
            let (mine, after) = rest.split_at_mut(range.len() * self.width);
            outputs.push(mine);
            rest = after;
        }
        let result = (groups.par_iter_mut().zip(ranges).zip(outputs))
            .map(|((group, range), output)| {
                self.tokens.copy_sequences(range, &mut group.tokens);
                forward(&group.tokens, &mut group.state, output, 1)
            })
            .collect();
        Some(result)
    }
}

/// Contiguous runs of the batch's sequences, one per thread, of about equal cost (a token
/// costs 1, a pair of tokens in attention `pair_cost`); `None` where there are fewer
/// sequences than threads or where the most even such split still leaves a thread a fifth
/// more than an even share. A group runs every layer on its own thread: no wait between
/// layers, and each thread reads the activations it wrote.
pub(super) fn sequence_groups(
    tokens: &PackedTokens,
    threads: usize,
    pair_cost: f64,
) -> Option<Vec<Range<usize>>> {
    let n = tokens.sequences();
    if threads < 2 || n < threads {
        return None;
    }
    let costs: Vec<f64> = (tokens.lengths())
        .map(|len| len as f64 + (len * len) as f64 * pair_cost)
        .collect();
    let share = costs.iter().sum::<f64>() / threads as f64;
    let mut cuts = vec![0];
    let mut before = 0.0;
    for (i, cost) in costs.iter().enumerate() {
        // A cut before sequence i when its middle lies past the next group's end.
        let end = share * cuts.len() as f64;
        if cuts.len() < threads && i > cuts[cuts.len() - 1] && before + cost / 2.0 > end {
            cuts.push(i);
        }
        before += cost;
    }
    cuts.push(n);
    let groups: Vec<Range<usize>> = cuts.windows(2).map(|w| w[0]..w[1]).collect();
    let cost = |g: &Range<usize>| costs[g.clone()].iter().sum::<f64>();
    let even = groups.len() == threads && groups.iter().all(|g| cost(g) <= 1.2 * share);
    even.then_some(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(lengths: &[usize]) -> PackedTokens {
        let mut tokens = PackedTokens::new();
        for &n in lengths {
            tokens.push_ids(&vec![1; n], &vec![0; n]);
        }
        tokens
    }

    #[test]
    fn sequences_split_into_even_groups_or_not_at_all() {
        let groups = |lengths: &[usize], threads, pair_cost| {
            sequence_groups(&batch(lengths), threads, pair_cost)
        };
        assert_eq!(groups(&[10; 8], 2, 0.0), Some(vec![0..4, 4..8]));
        assert_eq!(groups(&[10; 8], 4, 0.0), Some(vec![0..2, 2..4, 4..6, 6..8]));
        assert_eq!(groups(&[30, 10, 10, 10], 2, 0.0), Some(vec![0..1, 1..4]));
        // Attention's pairs count: 20² against two of 10² and 10 tokens each.
        assert_eq!(groups(&[20, 10, 10], 2, 0.1), Some(vec![0..1, 1..3]));
        // One sequence, one thread, or no split within a fifth of even.
        assert_eq!(groups(&[10], 2, 0.0), None);
        assert_eq!(groups(&[10; 8], 1, 0.0), None);
        assert_eq!(groups(&[100, 100, 100], 2, 0.0), None);
        assert_eq!(groups(&[256, 10, 10], 2, 0.0), None);
        assert_eq!(groups(&[10, 10, 10], 4, 0.0), None);
    }
}
