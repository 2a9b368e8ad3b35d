//! The query-block kernel without vector instructions, for a head width that is not a whole
//! number of vectors or a CPU without AVX2 and FMA (`Kernels::best`).

use std::ops::Range;

use super::{Block, Call, Unit, add_bias, vmath};

/// # Safety
/// As [`super::run_unit`].
pub(super) unsafe fn query_block(
    call: Call<'_>,
    unit: Unit,
    rows: Range<usize>,
    keys: Range<usize>,
    block: &mut Block<'_>,
) {
    let (d, p, n) = (call.shape.head_dim(), call.padded, unit.len);
    let values = &call.heads[call.at(2, unit.head, unit.start)..][..n * d];
    let values = &values[keys.start * d..keys.end * d];
    for (r, i) in rows.enumerate() {
        let q = &call.heads[call.at(0, unit.head, unit.start + i)..][..d];
        let row = &mut block.scores[r * p..(r + 1) * p];
        for j in keys.clone() {
            let dot: f32 = q
                .iter()
                .enumerate()
                .map(|(c, qc)| qc * block.keys[c * p + j])
                .sum();
            row[j] = dot * call.scale;
        }
        add_bias(call, unit, i..i + 1, keys.clone(), row);
        let row = &mut row[keys.clone()];
        let max = row.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
        let mut sum = 0.0;
        for s in row.iter_mut() {
            *s = vmath::exp(*s - max);
            sum += *s;
        }
        let inv = 1.0 / sum;
        let out = (unit.start + i) * call.shape.hidden + unit.head * d;
        for c in 0..d {
            let acc: f32 = row
                .iter()
                .zip(values.chunks_exact(d))
                .map(|(pj, v)| pj * v[c])
                .sum();
            // SAFETY: row `unit.start + i` and column head·d + c lie in this unit's part
            // of ctx.
            unsafe { *call.ctx.0.add(out + c) = acc * inv };
        }
    }
}
