use super::*;
use crate::cpu::test_support::values;

/// Attention in float64, straight from the definition, with the relative bias
/// `table[head][span - 1 + j - i]` when there is one, and keys farther than `window` from
/// a query given no weight.
fn reference(
    qkv: &[f32],
    offsets: &[usize],
    shape: AttentionShape,
    bias: Option<(&[f32], usize)>,
    window: Option<usize>,
) -> Vec<f64> {
    let (h, d) = (shape.hidden, shape.head_dim());
    let tokens = *offsets.last().unwrap();
    let mut ctx = vec![0f64; tokens * h];
    let get = |t: usize, part: usize, head: usize, c: usize| {
        qkv[t * 3 * h + part * h + head * d + c] as f64
    };
    for w in offsets.windows(2) {
        for head in 0..shape.heads {
            for i in w[0]..w[1] {
                let s: Vec<f64> = (w[0]..w[1])
                    .map(|j| {
                        if window.is_some_and(|w| i.abs_diff(j) > w) {
                            return f64::NEG_INFINITY;
                        }
                        (0..d)
                            .map(|c| get(i, 0, head, c) * get(j, 1, head, c))
                            .sum::<f64>()
                            / (d as f64).sqrt()
                            + bias.map_or(0.0, |(table, span)| {
                                table[head * (2 * span - 1) + span - 1 + j - i] as f64
                            })
                    })
                    .collect();
                let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|v| (v - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for c in 0..d {
                    ctx[i * h + head * d + c] = (w[0]..w[1])
                        .zip(&e)
                        .map(|(j, p)| p * get(j, 2, head, c))
                        .sum::<f64>()
                        / sum;
                }
            }
        }
    }
    ctx
}

#[test]
fn matches_float64_on_mixed_lengths_heads_and_paths() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let lengths = [1usize, 7, 24, 25, 0, 100, 16, 3];
    let mut offsets = vec![0];
    for n in lengths {
        offsets.push(offsets.last().unwrap() + n);
    }
    let tokens = *offsets.last().unwrap();
    let mut scratch = AttentionScratch::default();
    for (hidden, heads) in [
        (384, 12),
        (32, 4),
        (24, 3),
        (30, 3),
        (128, 2),
        (64, 4),
        (96, 2),
    ] {
        let shape = AttentionShape { hidden, heads };
        // Scores of a few units: large enough that the softmax is far from uniform.
        let qkv: Vec<f32> = values(tokens * 3 * hidden, hidden as u64)
            .iter()
            .map(|v| 4.0 * v)
            .collect();
        // No bias; a bias over the longest sequence's span, and over a wider one.
        let tables: Vec<(Vec<f32>, usize)> = [100, 130]
            .map(|span| (values(heads * (2 * span - 1), span as u64), span))
            .to_vec();
        let biases = [None, Some(&tables[0]), Some(&tables[1])];
        // Windows narrower than a query block, than a key tile, and than the longest
        // sequence, with and without a bias.
        let windows = [None, Some(0), Some(5), Some(30), Some(99)];
        let cases = (biases.iter().map(|b| (*b, None)))
            .chain(windows.iter().map(|w| (None, *w)))
            .chain([(Some(&tables[1]), Some(17))]);
        for (bias, window) in cases {
            let bias = bias.map(|(t, s)| (&t[..], *s));
            let want = reference(&qkv, &offsets, shape, bias, window);
            let input = AttentionInput {
                qkv: &qkv,
                offsets: &offsets,
                shape,
                bias: bias.map(|(table, span)| RelativeBias { table, span }),
                window,
                products: MatmulPrecision::F32,
            };
            let d = shape.head_dim();
            let runs = [
                (Kernels::Portable, 1),
                (Kernels::Avx2, 1),
                (Kernels::Avx2, 2),
                (Kernels::Avx512, 1),
                (Kernels::Avx512, 2),
            ];
            let available = |k: Kernels| match k {
                #[cfg(target_arch = "x86_64")]
                Kernels::Amx => false,
                Kernels::Portable => true,
                Kernels::Avx2 => has_avx2_fma() && d.is_multiple_of(8),
                Kernels::Avx512 => has_avx512() && d.is_multiple_of(16),
            };
            for (simd, threads) in runs.into_iter().filter(|(k, _)| available(*k)) {
                let mut ctx = vec![f32::NAN; tokens * hidden];
                pool.install(|| attention_with(input, &mut ctx, &mut scratch, threads, simd))
                    .unwrap();
                for (i, (g, w)) in ctx.iter().zip(&want).enumerate() {
                    assert!(
                        (*g as f64 - w).abs() < 1e-5 * (1.0 + w.abs()),
                        "hidden {hidden} heads {heads} {simd:?} threads {threads} bias {} \
                         window {window:?} at {i}: {g} vs {w}",
                        bias.is_some()
                    );
                }
            }
        }
    }
}

#[test]
fn pieces_cover_every_unit_once() {
    let offsets = [0, 5, 5, 300, 301, 320];
    let mut out = Vec::new();
    for (pieces, window) in [1, 2, 3, 8, 100]
        .into_iter()
        .flat_map(|p| [(p, None), (p, Some(3))])
    {
        split(&offsets, 4, window, pieces, &mut out);
        assert!(out.len() <= pieces.max(1));
        assert_eq!(out.first().unwrap().start, 0);
        assert_eq!(out.last().unwrap().end, 20);
        for w in out.windows(2) {
            assert_eq!(w[0].end, w[1].start, "{out:?}");
        }
    }
}

#[test]
fn shapes_that_disagree_are_errors() {
    let shape = AttentionShape {
        hidden: 8,
        heads: 2,
    };
    let mut scratch = AttentionScratch::default();
    let mut ctx = vec![0.0; 16];
    assert!(attention(&[0.0; 47], &[0, 2], shape, &mut ctx, &mut scratch, 1).is_err());
    assert!(attention(&[0.0; 48], &[0, 3, 2], shape, &mut ctx, &mut scratch, 1).is_err());
    let bad = AttentionShape {
        hidden: 8,
        heads: 3,
    };
    assert!(attention(&[0.0; 48], &[0, 2], bad, &mut ctx, &mut scratch, 1).is_err());
    // A relative bias narrower than a sequence, or with too few values for its span.
    for (table, span) in [(&[0.0; 2][..], 1), (&[0.0; 5][..], 2)] {
        let input = AttentionInput {
            qkv: &[0.0; 48],
            offsets: &[0, 2],
            shape,
            bias: Some(RelativeBias { table, span }),
            window: None,
            products: MatmulPrecision::F32,
        };
        assert!(biased_attention(input, &mut ctx, &mut scratch, 1).is_err());
    }
}

/// bf16 products on AMX's tiles, against the float64 attention of the inputs rounded to
/// bf16 as the kernel rounds them: what is left is the probabilities' rounding (8
/// significant bits, each weight off by at most 2⁻⁹ of itself), so the outputs are held to
/// 2⁻⁸ of the largest value, far below what a wrong layout or a missed key gives.
#[cfg(target_arch = "x86_64")]
#[test]
fn bf16_products_on_amx_match_float64_of_the_rounded_inputs() {
    if !super::amx::available(32) {
        eprintln!("SKIPPED: this CPU has no AMX");
        return;
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let lengths = [1usize, 31, 32, 33, 0, 100, 16, 257, 3];
    let mut offsets = vec![0];
    for n in lengths {
        offsets.push(offsets.last().unwrap() + n);
    }
    let tokens = *offsets.last().unwrap();
    let mut scratch = AttentionScratch::default();
    for (hidden, heads) in [(384, 12), (64, 4), (96, 2), (128, 2), (256, 2), (256, 1)] {
        let shape = AttentionShape { hidden, heads };
        let qkv: Vec<f32> = values(tokens * 3 * hidden, hidden as u64)
            .iter()
            .map(|v| half::bf16::from_f32(3.0 * v).to_f32())
            .collect();
        let table = values(heads * (2 * 300 - 1), 7);
        let cases = [
            (None, None),
            (Some((&table[..], 300)), None),
            (None, Some(0)),
            (None, Some(40)),
            (Some((&table[..], 300)), Some(17)),
        ];
        for (bias, window) in cases {
            let want = reference(&qkv, &offsets, shape, bias, window);
            let input = AttentionInput {
                qkv: &qkv,
                offsets: &offsets,
                shape,
                bias: bias.map(|(table, span)| RelativeBias { table, span }),
                window,
                products: MatmulPrecision::Bf16,
            };
            let largest = qkv.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
            for threads in [1, 2] {
                let mut ctx = vec![f32::NAN; tokens * hidden];
                pool.install(|| {
                    attention_with(input, &mut ctx, &mut scratch, threads, Kernels::Amx)
                })
                .unwrap();
                for (i, (g, w)) in ctx.iter().zip(&want).enumerate() {
                    assert!(
                        (*g as f64 - w).abs() < largest / 256.0,
                        "hidden {hidden} heads {heads} threads {threads} bias {} window \
                         {window:?} at {i}: {g} vs {w}",
                        bias.is_some()
                    );
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn bf16_products_choose_amx_only_where_it_runs() {
    let amx = super::amx::available(64);
    let chosen = Kernels::best(64, MatmulPrecision::Bf16);
    assert_eq!(chosen == Kernels::Amx, amx);
    assert_ne!(Kernels::best(64, MatmulPrecision::F32), Kernels::Amx);
    assert_ne!(Kernels::best(24, MatmulPrecision::Bf16), Kernels::Amx);
}
