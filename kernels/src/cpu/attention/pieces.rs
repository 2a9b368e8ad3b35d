//! How a call's (sequence, head) units are cut into pieces of about equal cost for the
//! pool's threads.

use std::ops::Range;

use super::{
    AttentionScratch, AttentionShape, KEY_TILE, PARALLEL_MIN_MACS, PIECES_PER_THREAD, QUERY_BLOCK,
};
use crate::cpu::AlignedVec;

/// Cuts the call's units into `scratch.pieces` (one piece when the whole call is small,
/// else several a thread) and gives every piece a buffer.
pub(super) fn plan_pieces(
    offsets: &[usize],
    shape: AttentionShape,
    window: Option<usize>,
    threads: usize,
    scratch: &mut AttentionScratch,
) {
    let squares: usize = offsets.windows(2).map(|w| (w[1] - w[0]).pow(2)).sum();
    let pieces = if squares * 2 * shape.hidden < PARALLEL_MIN_MACS {
        1
    } else {
        threads.max(1) * PIECES_PER_THREAD
    };
    split(offsets, shape.heads, window, pieces, &mut scratch.pieces);
    if scratch.buffers.len() < scratch.pieces.len() {
        let count = scratch.pieces.len();
        scratch.buffers.resize_with(count, AlignedVec::default);
    }
}

/// Cuts the units (sequence-major, then head) into at most `pieces` contiguous ranges of
/// about equal cost, into `out`.
pub(super) fn split(
    offsets: &[usize],
    heads: usize,
    window: Option<usize>,
    pieces: usize,
    out: &mut Vec<Range<usize>>,
) {
    out.clear();
    let cost = |u: usize| {
        let seq = u / heads;
        let len = offsets[seq + 1] - offsets[seq];
        let keys = window.map_or(len, |w| len.min(2 * w + QUERY_BLOCK + KEY_TILE));
        len * (keys + KEY_TILE)
    };
    let units = (offsets.len() - 1) * heads;
    let total: usize = (0..units).map(cost).sum();
    let pieces = pieces.clamp(1, units.max(1));
    let mut start = 0;
    let mut done = 0;
    for u in 0..units {
        done += cost(u);
        let cut = total * (out.len() + 1) / pieces;
        if done >= cut && out.len() + 1 < pieces {
            out.push(start..u + 1);
            start = u + 1;
        }
    }
    out.push(start..units);
}
