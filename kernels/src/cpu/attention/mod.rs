//! Multi-head self-attention over sequences packed end to end, each on its own length: no
//! padding. `ctx = softmax(Q Kᵀ / √d + B) V` for every (sequence, head), where `B`
//! is an optional bias by relative position (MPNet's), else zero. With a sliding window
//! (ModernBERT's local layers), a query attends only to the keys near it, and a block of
//! queries computes only the scores of the key tiles its window touches, so a windowed
//! layer costs in proportion to its length, not to its square.
//!
//! The input is the output of the fused query/key/value product, `[tokens, 3 · hidden]`:
//! queries in columns `0..hidden`, keys in `hidden..2·hidden`, values after them, head `h`
//! at `h·d..(h+1)·d` within each. A first pass copies it head-major (`[3][heads][tokens][d]`):
//! in place, a head's values for one token come every `3 · hidden` floats, on a new page
//! each, a stride the prefetchers do not follow and that maps a head onto a few cache sets;
//! head-major, a sequence's queries, keys or values for one head are one contiguous run.
//!
//! The work is cut into (sequence, head) units, which write disjoint parts of `ctx`, and the
//! units into pieces of about equal cost (attention grows with the square of a sequence's
//! length, or with the length within a window) that the rayon pool's threads take as they
//! come free. Per unit, the keys are copied transposed (`[d][length]`), so that a block of
//! scores is a register-tiled product like the dense layers' (on AVX2 6 queries × 16 keys,
//! twelve accumulators; on AVX-512 12 × 32, 24; no horizontal sums);
//! each row of the block goes through the softmax (exponentials from [`super::vmath`]); the
//! probabilities multiply the values, and each row is divided by its sum at the end. A
//! block of [`QUERY_BLOCK`] queries keeps its scores in L1 or L2, whatever the length.
//!
//! A model served with bf16 products ([`MatmulPrecision::Bf16`]) runs attention's products
//! in bf16 too where the CPU has AMX (`amx`): its units read `qkv` in place, round it into
//! tiles' operands, and keep the softmax f32.

use std::ops::Range;

use super::vmath::{self, has_avx2_fma, has_avx512};
use super::{AlignedVec, MatmulPrecision};
use crate::KernelError;
use head_major::to_head_major;
use pieces::plan_pieces;
#[cfg(test)]
use pieces::split;

/// Queries whose scores are computed, normalised and applied together.
const QUERY_BLOCK: usize = 24;
/// Keys per score tile; the transposed keys are padded to a multiple of it.
const KEY_TILE: usize = 16;
/// Pieces per thread, so that a thread the scheduler preempts does not hold the others up.
const PIECES_PER_THREAD: usize = 4;
/// Below this many multiply-adds in all, the call runs on one thread.
const PARALLEL_MIN_MACS: usize = 256 * 1024;
/// Below this many values, the head-major copy runs on one thread.
const PARALLEL_MIN_VALUES: usize = 64 * 1024;

/// The heads and the width they split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    pub hidden: usize,
    pub heads: usize,
}

impl AttentionShape {
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

/// Scores added before the softmax by relative position, as MPNet adds them: head `h`'s
/// score of query `i` for key `j` of a sequence gains
/// `table[h · (2·span − 1) + span − 1 + j − i]`. `span` is at least the longest sequence.
#[derive(Clone, Copy, Debug)]
pub struct RelativeBias<'a> {
    pub table: &'a [f32],
    pub span: usize,
}

impl RelativeBias<'_> {
    /// The biases of query `i`'s scores for keys `0..len` of head `head`.
    #[inline(always)]
    fn row(&self, head: usize, i: usize, len: usize) -> &[f32] {
        let start = head * (2 * self.span - 1) + self.span - 1 - i;
        &self.table[start..start + len]
    }
}

/// What [`biased_attention`] runs on: `qkv[tokens, 3·hidden]`, sequences at `offsets`.
#[derive(Clone, Copy, Debug)]
pub struct AttentionInput<'a> {
    pub qkv: &'a [f32],
    pub offsets: &'a [usize],
    pub shape: AttentionShape,
    pub bias: Option<RelativeBias<'a>>,
    /// Each query attends only to the keys at most this many positions from it; `None`:
    /// to the whole sequence.
    pub window: Option<usize>,
    /// The precision of the scores' and the weighted sum's products: bf16 runs on AMX's
    /// tiles where the CPU has them (`attention/amx.rs`), and as f32 elsewhere.
    pub products: MatmulPrecision,
}

/// Buffers reused across calls: the head-major copy of the input; per piece, the
/// transposed keys and a block of scores; and the pieces themselves. Grown to the largest
/// batch seen, never shrunk.
#[derive(Default)]
pub struct AttentionScratch {
    heads: AlignedVec,
    buffers: Vec<AlignedVec>,
    pieces: Vec<Range<usize>>,
}

/// One unit: sequence `start..start + len` of the batch, head `head`.
#[derive(Clone, Copy)]
struct Unit {
    start: usize,
    len: usize,
    head: usize,
}

/// What every unit of a call shares.
#[derive(Clone, Copy)]
struct Call<'a> {
    /// The input head-major: `[3][heads][tokens][d]`; for kernels that
    /// [read it in place](Kernels::reads_in_place), `qkv` as given.
    heads: &'a [f32],
    tokens: usize,
    shape: AttentionShape,
    /// `ctx`, `[tokens, hidden]`; units write disjoint rows × columns.
    ctx: CtxPtr,
    scale: f32,
    /// The row stride of a block's scores: the longest sequence's keys, padded to
    /// [`KEY_TILE`] (or to AMX's products).
    padded: usize,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    kernels: Kernels,
    bias: Option<RelativeBias<'a>>,
    window: Option<usize>,
}

impl Call<'_> {
    /// Where value `c` of token `t`'s query (`part` 0), key (1) or value (2) for `head` is.
    #[inline(always)]
    fn at(&self, part: usize, head: usize, t: usize) -> usize {
        ((part * self.shape.heads + head) * self.tokens + t) * self.shape.head_dim()
    }

    /// The keys a block of queries `rows` of a sequence of `len` tokens scores: all of
    /// them, or those its window reaches, from the start of a key tile.
    fn keys(&self, rows: &Range<usize>, len: usize) -> Range<usize> {
        match self.window {
            None => 0..len,
            Some(w) => {
                let first = rows.start.saturating_sub(w) / KEY_TILE * KEY_TILE;
                first..(rows.end + w).min(len)
            }
        }
    }
}

/// Which query-block kernels a call runs: AMX's tiles for bf16 products where the CPU has
/// them, else the widest vectors the CPU has for which d is a whole number of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernels {
    #[cfg(target_arch = "x86_64")]
    Amx,
    Avx512,
    Avx2,
    Portable,
}

impl Kernels {
    /// Whether the kernels read `qkv` as given rather than a head-major copy.
    fn reads_in_place(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        return self == Kernels::Amx;
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    fn best(head_dim: usize, products: MatmulPrecision) -> Kernels {
        #[cfg(target_arch = "x86_64")]
        if products == MatmulPrecision::Bf16 && amx::available(head_dim) {
            return Kernels::Amx;
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = products;
        if has_avx512() && head_dim.is_multiple_of(16) {
            Kernels::Avx512
        } else if has_avx2_fma() && head_dim.is_multiple_of(8) {
            Kernels::Avx2
        } else {
            Kernels::Portable
        }
    }
}

/// The output shared by the threads of one call.
#[derive(Clone, Copy)]
struct CtxPtr(*mut f32);
// SAFETY: the units of a call write disjoint parts of ctx (see `Call`), and the call returns
// only after every unit has run, before the borrow of ctx ends.
unsafe impl Send for CtxPtr {}
// SAFETY: as for Send.
unsafe impl Sync for CtxPtr {}

/// About how much faster attention runs over heads of `head_dim` values with `products`
/// than with f32's, for cost models that weigh it against the dense layers: AMX's kernel
/// runs 1.5× (13-token sequences) to 3× (512 tokens, heads of 64) f32's
/// (`encoder_bench::attention_one_core`), about twice at a few hundred tokens, where
/// attention weighs most.
pub fn attention_speedup(products: MatmulPrecision, head_dim: usize) -> f64 {
    match Kernels::best(head_dim, products) {
        #[cfg(target_arch = "x86_64")]
        Kernels::Amx => 2.0,
        _ => 1.0,
    }
}

/// `ctx[tokens, hidden]` = the attention of every sequence (tokens `offsets[i]..offsets[i+1]`)
/// over itself, from `qkv[tokens, 3·hidden]`, on up to `threads` threads of the current rayon
/// pool.
pub fn attention(
    qkv: &[f32],
    offsets: &[usize],
    shape: AttentionShape,
    ctx: &mut [f32],
    scratch: &mut AttentionScratch,
    threads: usize,
) -> Result<(), KernelError> {
    let input = AttentionInput {
        qkv,
        offsets,
        shape,
        bias: None,
        window: None,
        products: MatmulPrecision::F32,
    };
    biased_attention(input, ctx, scratch, threads)
}

/// [`attention`] with the scores biased by relative position where `input.bias` is set,
/// and each query held to its window where `input.window` is.
pub fn biased_attention(
    input: AttentionInput<'_>,
    ctx: &mut [f32],
    scratch: &mut AttentionScratch,
    threads: usize,
) -> Result<(), KernelError> {
    let kernels = Kernels::best(input.shape.head_dim(), input.products);
    attention_with(input, ctx, scratch, threads, kernels)
}

/// [`biased_attention`] on the given kernels.
fn attention_with(
    input: AttentionInput<'_>,
    ctx: &mut [f32],
    scratch: &mut AttentionScratch,
    threads: usize,
    kernels: Kernels,
) -> Result<(), KernelError> {
    let AttentionInput {
        qkv,
        offsets,
        shape,
        bias,
        window,
        products: _,
    } = input;
    check(qkv, offsets, shape, ctx)?;
    let longest = offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    check_bias(bias, shape, longest)?;
    if longest == 0 {
        return Ok(());
    }
    // A window as wide as the longest sequence holds every key; wider ones change nothing
    // and would overflow the cost arithmetic.
    let window = window.map(|w| w.min(longest));
    let tokens = *offsets.last().expect("checked");
    plan_pieces(offsets, shape, window, threads, scratch);
    // AMX's kernel reads each query, key and value once, to round it: it reads them where
    // they are.
    let heads = match kernels.reads_in_place() {
        true => qkv,
        false => {
            scratch.heads.resize_for_overwrite(qkv.len());
            to_head_major(qkv, tokens, shape, &mut scratch.heads, threads);
            &scratch.heads[..]
        }
    };
    let d = shape.head_dim();
    let padded = padded_width(longest, kernels);
    let call = Call {
        heads,
        tokens,
        shape,
        ctx: CtxPtr(ctx.as_mut_ptr()),
        scale: 1.0 / (d as f32).sqrt(),
        padded,
        kernels,
        bias,
        window,
    };
    let (pieces, buffers) = (&scratch.pieces, &mut scratch.buffers);
    run_pieces(call, offsets, pieces, buffers);
    Ok(())
}

/// Runs the call's units, `pieces` of them at a time (the first on this thread, the rest
/// on the pool), each piece with its buffer.
fn run_pieces(
    call: Call<'_>,
    offsets: &[usize],
    pieces: &[Range<usize>],
    buffers: &mut [AlignedVec],
) {
    let (d, shape, kernels) = (call.shape.head_dim(), call.shape, call.kernels);
    let run = |range: Range<usize>, buffer: &mut AlignedVec| {
        let len = piece_len(d, call.padded, kernels);
        if buffer.len() < len {
            buffer.resize(len);
        }
        // Configured once a piece: configuring and releasing the tiles costs about what a
        // unit of a short sequence does.
        // SAFETY: `Kernels::best` chose AMX only where it is available; the units below run
        // no other work on this thread.
        #[cfg(target_arch = "x86_64")]
        let _tiles = (kernels == Kernels::Amx).then(|| unsafe { amx::configure() });
        for u in range {
            let (seq, head) = (u / shape.heads, u % shape.heads);
            let unit = Unit {
                start: offsets[seq],
                len: offsets[seq + 1] - offsets[seq],
                head,
            };
            // SAFETY: `check` bounded every sequence inside qkv (so inside its head-major
            // copy) and ctx; this unit writes only its sequence's rows and its head's
            // columns of ctx, which no other unit writes; the buffer holds piece_len values.
            unsafe { run_unit(call, unit, buffer) };
        }
    };
    let (first, rest) = pieces.split_first().expect("at least one piece");
    let (first_buffer, rest_buffers) = buffers.split_first_mut().expect("sized above");
    rayon::scope(|s| {
        for (range, buffer) in rest.iter().zip(rest_buffers) {
            let run = &run;
            s.spawn(move |_| run(range.clone(), buffer));
        }
        run(first.clone(), first_buffer);
    });
}

fn check(
    qkv: &[f32],
    offsets: &[usize],
    shape: AttentionShape,
    ctx: &[f32],
) -> Result<(), KernelError> {
    let fail = |detail: String| {
        Err(KernelError::Shape {
            op: "cpu::attention",
            detail,
        })
    };
    if shape.heads == 0 || shape.hidden == 0 || !shape.hidden.is_multiple_of(shape.heads) {
        return fail(format!(
            "{} heads cannot split {} values",
            shape.heads, shape.hidden
        ));
    }
    let tokens = *offsets.last().unwrap_or(&0);
    if offsets.first() != Some(&0) || offsets.windows(2).any(|w| w[1] < w[0]) {
        return fail("offsets must start at 0 and never decrease".into());
    }
    if qkv.len() != tokens * 3 * shape.hidden || ctx.len() != tokens * shape.hidden {
        return fail(format!(
            "{tokens} tokens need {} qkv and {} ctx values, got {} and {}",
            tokens * 3 * shape.hidden,
            tokens * shape.hidden,
            qkv.len(),
            ctx.len()
        ));
    }
    Ok(())
}

fn check_bias(
    bias: Option<RelativeBias<'_>>,
    shape: AttentionShape,
    longest: usize,
) -> Result<(), KernelError> {
    let Some(b) = bias else { return Ok(()) };
    let needed = (b.span.checked_mul(2))
        .and_then(|w| w.checked_sub(1))
        .and_then(|w| w.checked_mul(shape.heads));
    if b.span < longest.max(1) || needed.is_none_or(|n| b.table.len() < n) {
        return Err(KernelError::Shape {
            op: "cpu::attention",
            detail: format!(
                "a relative bias over {} positions ({} values) for {} heads and sequences of \
                 up to {longest} tokens",
                b.span,
                b.table.len(),
                shape.heads
            ),
        });
    }
    Ok(())
}

/// Adds the relative bias, if any, to the scores of the queries `rows` of a unit for
/// `keys`, and gives the keys in that range but outside a query's window a score of −∞
/// (whose exponential is exactly 0).
fn add_bias(
    call: Call<'_>,
    unit: Unit,
    rows: Range<usize>,
    keys: Range<usize>,
    scores: &mut [f32],
) {
    let p = call.padded;
    if let Some(bias) = call.bias {
        for (r, i) in rows.clone().enumerate() {
            let row = &mut scores[r * p + keys.start..r * p + keys.end];
            let biases = &bias.row(unit.head, i, unit.len)[keys.clone()];
            row.iter_mut().zip(biases).for_each(|(s, b)| *s += b);
        }
    }
    if let Some(w) = call.window {
        for (r, i) in rows.enumerate() {
            let near = i.saturating_sub(w).max(keys.start)..(i + w + 1).min(keys.end);
            scores[r * p + keys.start..r * p + near.start].fill(f32::NEG_INFINITY);
            scores[r * p + near.end..r * p + keys.end].fill(f32::NEG_INFINITY);
        }
    }
}

/// The row stride of the scores for sequences of up to `longest` tokens. Rows of keys and
/// scores `padded` floats apart; an odd number of tiles keeps that stride off powers of two,
/// which would map a column of them onto a few cache sets.
fn padded_width(longest: usize, kernels: Kernels) -> usize {
    #[cfg(target_arch = "x86_64")]
    if kernels == Kernels::Amx {
        return amx::padded(longest);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = kernels;
    let tiles = longest.div_ceil(KEY_TILE);
    (tiles + 1 - tiles % 2) * KEY_TILE
}

/// Floats of scratch one piece needs for sequences of up to `padded` keys.
fn piece_len(d: usize, padded: usize, kernels: Kernels) -> usize {
    #[cfg(target_arch = "x86_64")]
    if kernels == Kernels::Amx {
        return amx::piece_len(d, padded);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = kernels;
    d * padded + QUERY_BLOCK * padded
}

/// A unit's working buffers.
struct Block<'a> {
    /// `[d][padded]`: key `j`'s value `c` at `c · padded + j`, zeros past the sequence.
    keys: &'a mut [f32],
    /// `[QUERY_BLOCK][padded]`: the block's scores, then its probabilities.
    scores: &'a mut [f32],
}

/// Attention of one head over one sequence.
///
/// # Safety
/// The sequence lies inside the head-major input and `ctx`; no other thread writes this
/// unit's part of `ctx`; `buffer` holds at least [`piece_len`] values.
unsafe fn run_unit(call: Call<'_>, unit: Unit, buffer: &mut AlignedVec) {
    // SAFETY: `Kernels::best` chose AMX only where `amx::available`, and the piece holds
    // the tiles; the rest is the caller's contract, with the piece's length for AMX
    // (`piece_len`).
    #[cfg(target_arch = "x86_64")]
    if call.kernels == Kernels::Amx {
        return unsafe { amx::run_unit(call, unit, buffer) };
    }
    let (keys, scores) = buffer.split_at_mut(call.shape.head_dim() * call.padded);
    let mut block = Block { keys, scores };
    transpose_keys(call, unit, block.keys);
    let mut q = 0;
    while q < unit.len {
        let rows = QUERY_BLOCK.min(unit.len - q);
        // SAFETY: forwarded contract; rows q..q+rows belong to this unit.
        unsafe { query_block(call, unit, q..q + rows, &mut block) };
        q += rows;
    }
}

/// `keys[c · padded + j]` = key `j`'s value `c`; zeros past the sequence to a whole tile.
fn transpose_keys(call: Call<'_>, unit: Unit, keys: &mut [f32]) {
    let (d, p) = (call.shape.head_dim(), call.padded);
    let first = call.at(1, unit.head, unit.start);
    let source = &call.heads[first..first + unit.len * d];
    for (j, key) in source.chunks_exact(d).enumerate() {
        for (c, v) in key.iter().enumerate() {
            keys[c * p + j] = *v;
        }
    }
    let tile_end = unit.len.div_ceil(KEY_TILE) * KEY_TILE;
    for c in 0..d {
        keys[c * p + unit.len..c * p + tile_end].fill(0.0);
    }
}

/// Scores, softmax and the weighted values for the queries `rows` of a unit, whose keys
/// are in `block`.
///
/// # Safety
/// As [`run_unit`].
unsafe fn query_block(call: Call<'_>, unit: Unit, rows: Range<usize>, block: &mut Block<'_>) {
    let keys = call.keys(&rows, unit.len);
    // SAFETY (both arms): the CPU has the kernels' instructions and d is a whole number of
    // their vectors (`Kernels::best` chose them so); the rest is the caller's contract.
    #[cfg(target_arch = "x86_64")]
    match call.kernels {
        Kernels::Avx512 => unsafe {
            avx512::scores(call, unit, rows.clone(), keys.clone(), block);
            add_bias(call, unit, rows.clone(), keys.clone(), block.scores);
            return avx512::softmax_values(call, unit, rows, keys, block);
        },
        Kernels::Avx2 => unsafe {
            avx2::scores(call, unit, rows.clone(), keys.clone(), block);
            add_bias(call, unit, rows.clone(), keys.clone(), block.scores);
            return avx2::softmax_values(call, unit, rows, keys, block);
        },
        Kernels::Portable => {}
        Kernels::Amx => unreachable!("AMX runs whole units (`run_unit`)"),
    }
    // SAFETY: the caller's contract.
    unsafe { portable::query_block(call, unit, rows, keys, block) }
}

mod portable;

mod head_major;
mod pieces;

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

#[cfg(test)]
mod tests;
