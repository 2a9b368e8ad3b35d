//! Batches of several sequences on several threads: a group of whole sequences per thread,
//! each group's layers run on its own thread, where the sequences divide evenly. Layers
//! split over the threads wait for each other at every layer and read what the other
//! thread wrote; a group does neither. Both CPU encoders run their batches this way when
//! they can, and split each layer otherwise (one sequence, or a long one among short ones).

use kernels::cpu::with_pool_awake;
use rayon::prelude::*;

use crate::ModelError;
use crate::text::packed::PackedTokens;

/// A group of sequences, the state its forward pass runs in, and its rows of output.
#[derive(Default)]
pub(super) struct Group<S> {
    tokens: PackedTokens,
    state: S,
    output: Vec<f32>,
}

/// A batch to run in groups, if it divides evenly.
pub(super) struct Grouped<'a> {
    pub(super) tokens: &'a PackedTokens,
    pub(super) threads: usize,
    /// What one pair of tokens costs in attention, against a token's dense layers (1).
    pub(super) pair_cost: f64,
    /// A token's dense layers, FLOPs a layer at f32's rate (fewer where they run faster).
    pub(super) token_flops: f64,
    /// Output values per row.
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
            // Every layer is split over the threads: keep them awake between layers.
            None => with_pool_awake(|| forward(self.tokens, whole, output, self.threads)),
        }
    }

    fn in_groups<S: Default + Send>(
        &self,
        groups: &mut Vec<Group<S>>,
        output: &mut [f32],
        forward: Forward<'_, S>,
    ) -> Option<Result<(), ModelError>> {
        let spare = SPLIT_FLOPS / self.token_flops;
        let picks = sequence_groups(self.tokens, self.threads, self.pair_cost, spare)?;
        groups.resize_with(picks.len(), Group::default);
        let width = self.width;
        let result = (groups.par_iter_mut().zip(&picks))
            .map(|(group, picked)| {
                self.tokens
                    .copy_picked(picked.iter().copied(), &mut group.tokens);
                group.output.resize(group.tokens.output_rows() * width, 0.0);
                forward(&group.tokens, &mut group.state, &mut group.output, 1)
            })
            .collect();
        // One row a sequence, unless some keep their every state.
        let starts = self.tokens.keeps_any_states().then(|| self.output_starts());
        for (group, picked) in groups.iter().zip(&picks) {
            let mut rows = group.output.as_slice();
            for &sequence in picked {
                let n = self.tokens.output_rows_of(sequence) * width;
                let start = starts.as_ref().map_or(sequence, |s| s[sequence]);
                output[start * width..][..n].copy_from_slice(&rows[..n]);
                rows = &rows[n..];
            }
        }
        Some(result)
    }

    /// Where each sequence's rows start in the batch's output.
    fn output_starts(&self) -> Vec<usize> {
        let mut start = 0;
        (0..self.tokens.sequences())
            .map(|i| {
                let this = start;
                start += self.tokens.output_rows_of(i);
                this
            })
            .collect()
    }
}

/// The most a group may cost and still run on its own thread: `SLACK` times an even share,
/// plus what splitting each layer over the threads costs in waits, `SPLIT_FLOPS` of a
/// layer's dense work: a batch of a few short texts does not repay it (two threads run one
/// 26-token MiniLM text about 1.5 times as fast as one), and a group reads only what its
/// own thread wrote. `SPLIT_FLOPS` is 16 MiniLM tokens (5.6 of ModernBERT-base's).
/// Measured on the serving benchmark's texts, against groups only within a fifth of an
/// even share: MiniLM 1.08x the texts/s at batches of 2, 1.00-1.02x at 3 to 32; as fast as
/// 1.6 to 2 times a share with nothing spare, which would run three 100-token texts as two
/// and one, slower than split. ModernBERT-base: 0.96x at batches of 2, 1.01x at 4, 1.04x
/// at 8 (with 16 of its tokens spare, 0.91x at 2: each group streams all of its weights).
const SLACK: f64 = 1.2;
const SPLIT_FLOPS: f64 = 16.0 * MINILM_TOKEN_FLOPS;
const MINILM_TOKEN_FLOPS: f64 = (8 * 384 * 384 + 4 * 384 * 1536) as f64;

/// The batch's sequences dealt into one group per thread, longest first each to the group
/// with the least cost so far (a token costs 1, a pair of tokens in attention `pair_cost`);
/// each group in batch order. `None` where there are fewer sequences than threads, or where
/// a group is left more than `SLACK` times an even share plus `spare`.
pub(super) fn sequence_groups(
    tokens: &PackedTokens,
    threads: usize,
    pair_cost: f64,
    spare: f64,
) -> Option<Vec<Vec<usize>>> {
    let n = tokens.sequences();
    if threads < 2 || n < threads {
        return None;
    }
    let costs: Vec<f64> = (tokens.lengths())
        .map(|len| len as f64 + (len * len) as f64 * pair_cost)
        .collect();
    let share = costs.iter().sum::<f64>() / threads as f64;
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| costs[b].total_cmp(&costs[a]));
    let mut groups = vec![(0.0f64, Vec::new()); threads];
    for i in order {
        let least = (groups.iter_mut()).min_by(|a, b| a.0.total_cmp(&b.0))?;
        least.0 += costs[i];
        least.1.push(i);
    }
    if groups.iter().any(|(cost, _)| *cost > SLACK * share + spare) {
        return None;
    }
    let in_batch_order = |(_, mut picked): (f64, Vec<usize>)| {
        picked.sort_unstable();
        picked
    };
    Some(groups.into_iter().map(in_batch_order).collect())
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
            sequence_groups(&batch(lengths), threads, pair_cost, 16.0)
        };
        let some = |groups: &[&[usize]]| Some(groups.iter().map(|g| g.to_vec()).collect());
        assert_eq!(
            groups(&[10; 8], 2, 0.0),
            some(&[&[0, 2, 4, 6], &[1, 3, 5, 7]])
        );
        let fours: &[&[usize]] = &[&[0, 4], &[1, 5], &[2, 6], &[3, 7]];
        assert_eq!(groups(&[10; 8], 4, 0.0), some(fours));
        assert_eq!(groups(&[30, 10, 10, 10], 2, 0.0), some(&[&[0], &[1, 2, 3]]));
        // Not in runs: the two long ones apart.
        assert_eq!(groups(&[40, 40, 10, 10], 2, 0.0), some(&[&[0, 2], &[1, 3]]));
        // Attention's pairs count: 20² against two of 10² and 10 tokens each.
        assert_eq!(groups(&[20, 10, 10], 2, 0.1), some(&[&[0], &[1, 2]]));
        // A few short texts go apart however uneven: splitting their layers costs more.
        assert_eq!(groups(&[30, 10], 2, 0.0), some(&[&[0], &[1]]));
        // One sequence, one thread, or no split within what an even share allows.
        assert_eq!(groups(&[10], 2, 0.0), None);
        assert_eq!(groups(&[10; 8], 1, 0.0), None);
        assert_eq!(groups(&[100, 100, 100], 2, 0.0), None);
        assert_eq!(groups(&[256, 10, 10], 2, 0.0), None);
        assert_eq!(groups(&[10, 10, 10], 4, 0.0), None);
    }
}
