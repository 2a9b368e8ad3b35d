//! Warm-up: every batch size once (buffers grow, kernels compile), then timed rounds; the
//! fastest run of each size seeds the latency model's shape, since the noise of a shared
//! host only ever adds time (a preempted run cannot skew it), and the model's scale follows
//! the typical level from the first batches served on. Dense models run batches of rows;
//! text models batches of sequences of a typical length, sized in token-units.
//!
//! Readiness waits for warm-up, and a pod scaled up from zero holds its first request for
//! it, so warm-up does only what the first batches need:
//! - sizes grow until one batch takes longer than the model's p99 budget twice in a row (two
//!   sizes at least): no batch of that size or larger can be formed within the budget, and
//!   the latency model extrapolates beyond the largest size it was given;
//! - timed rounds stop once warm-up has taken [`BUDGET`] (at least one runs). The latency
//!   model's scale and spread follow every batch served from then on.

use std::time::{Duration, Instant};

use models::{Batch, InputKind, Model, PackedTokens, TextInput};

/// Timed rounds at most, and at least one.
const ROUNDS: usize = 5;

/// Warm-up time after which no further timed round starts.
const BUDGET: Duration = Duration::from_millis(250);

/// Tokens in each warm-up sequence (or the model's limit, if lower): a sentence's worth.
const SEQUENCE_TOKENS: usize = 32;

/// Batch sizes run at warm-up: powers of two up to the largest batch, and the largest.
pub fn warmup_buckets(max_batch_rows: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = std::iter::successors(Some(1usize), |s| s.checked_mul(2))
        .take_while(|s| *s < max_batch_rows)
        .collect();
    sizes.push(max_batch_rows);
    sizes
}

/// One warm-up batch: its size in batch rows, and what the model runs.
enum Sample {
    Dense {
        rows: usize,
        values: Vec<f32>,
    },
    Text {
        units: usize,
        tokens: PackedTokens,
    },
    /// Zeros of every input, variable dimensions 1.
    Tensors {
        rows: usize,
        tensors: Vec<seam::Tensor>,
    },
}

impl Sample {
    fn rows(&self) -> usize {
        match self {
            Sample::Dense { rows, .. } => *rows,
            Sample::Text { units, .. } => *units,
            Sample::Tensors { rows, .. } => *rows,
        }
    }

    fn batch(&self) -> Batch<'_> {
        match self {
            Sample::Dense { rows, values } => Batch::Dense {
                values,
                rows: *rows,
            },
            Sample::Text { tokens, .. } => Batch::Tokens(tokens),
            Sample::Tensors { .. } => unreachable!("tensor samples run with forward_tensors"),
        }
    }
}

/// The batches to time, up to `max_rows` batch rows and `max_outputs` output rows.
fn samples(input: &InputKind, max_rows: usize, max_outputs: usize) -> Vec<Sample> {
    match input {
        InputKind::Dense { width } => warmup_buckets(max_rows)
            .into_iter()
            .map(|rows| Sample::Dense {
                rows,
                values: vec![0.0; rows * width],
            })
            .collect(),
        InputKind::Text(text) => text_samples(text, max_rows, max_outputs),
        InputKind::Tensors(signature) => tensor_samples(signature, max_rows),
    }
}

fn tensor_samples(signature: &seam::Signature, max_rows: usize) -> Vec<Sample> {
    let sizes = match signature.batched {
        true => warmup_buckets(max_rows),
        false => vec![1],
    };
    sizes
        .into_iter()
        .map(|rows| {
            let tensors = signature
                .inputs
                .iter()
                .filter(|s| !s.optional)
                .map(|s| {
                    let dims = s.dims.iter().map(|&d| d.max(1) as usize);
                    let shape = signature.batched.then_some(rows).into_iter().chain(dims);
                    seam::Tensor::zeros(&s.name, s.dtype, shape.collect())
                })
                .collect();
            Sample::Tensors { rows, tensors }
        })
        .collect()
}

/// Whether a tensor model takes inputs of any size past the batch dimension: warm-up's
/// ones may then be no size it accepts (an image smaller than its pooling), and such a
/// failure says nothing about the requests it will serve.
fn variable_shapes(input: &InputKind) -> bool {
    match input {
        InputKind::Tensors(s) => s.inputs.iter().any(|t| t.dims.iter().any(|&d| d < 0)),
        _ => false,
    }
}

/// Runs one warm-up sample.
fn run_sample(model: &mut dyn Model, sample: &Sample, width: usize) -> Result<(), String> {
    if let Sample::Tensors { tensors, .. } = sample {
        let InputKind::Tensors(signature) = model.input() else {
            return Err("a tensor sample for a model of rows or texts".into());
        };
        let outputs: Vec<&str> = signature.outputs.iter().map(|o| o.name.as_str()).collect();
        return model
            .forward_tensors(tensors, &outputs)
            .map(drop)
            .map_err(|e| e.to_string());
    }
    let batch = sample.batch();
    let mut output = vec![0f32; batch.rows() * width];
    model.forward(batch, &mut output).map_err(|e| e.to_string())
}

fn text_samples(text: &TextInput, max_rows: usize, max_outputs: usize) -> Vec<Sample> {
    let len = SEQUENCE_TOKENS.min(text.max_seq_len).max(1);
    let per_sequence = text.units(len).ceil().max(1.0) as usize;
    let mut counts: Vec<usize> = warmup_buckets(max_rows)
        .into_iter()
        .map(|units| (units / per_sequence).clamp(1, max_outputs.max(1)))
        .collect();
    counts.dedup();
    // Ids a vocabulary of any size holds, past the few special tokens at its start.
    let ids: Vec<u32> = (0..len as u32).map(|i| 1 + i % 4).collect();
    let type_ids = vec![0; len];
    counts
        .into_iter()
        .map(|n| {
            let mut tokens = PackedTokens::with_capacity(n, n * len);
            for _ in 0..n {
                tokens.push_ids(&ids, &type_ids);
            }
            Sample::Text {
                units: n * per_sequence,
                tokens,
            }
        })
        .collect()
}

/// Times the warm-up batches up to the first that takes longer than `p99`: (batch rows,
/// fastest time).
pub fn warm_up(
    model: &mut dyn Model,
    max_rows: usize,
    max_outputs: usize,
    p99: Duration,
) -> Result<Vec<(usize, Duration)>, String> {
    let limits = Limits {
        max_rows,
        max_outputs,
        p99,
        budget: BUDGET,
    };
    let warmup = warm_up_within(model, &limits)?;
    if warmup.timed_rounds < ROUNDS {
        tracing::info!(
            timed_rounds = warmup.timed_rounds,
            budget_ms = BUDGET.as_millis() as u64,
            "warm-up timed fewer rounds: its time budget was spent"
        );
    }
    Ok(warmup.fastest)
}

/// What a warm-up measured.
struct Warmup {
    /// (batch rows, fastest time) per warm-up batch.
    fastest: Vec<(usize, Duration)>,
    /// Timed rounds run: [`ROUNDS`], or fewer once `budget` was spent.
    timed_rounds: usize,
}

/// What a warm-up may run.
struct Limits {
    max_rows: usize,
    max_outputs: usize,
    /// No size past the first whose batch takes longer than this.
    p99: Duration,
    /// No timed round after the first starts once warm-up has taken this long.
    budget: Duration,
}

/// [`warm_up`] within `limits`.
fn warm_up_within(model: &mut dyn Model, limits: &Limits) -> Result<Warmup, String> {
    let mut samples = samples(&model.input(), limits.max_rows, limits.max_outputs);
    let width = model.output_width();
    let start = Instant::now();
    // The untimed round, in growing sizes, up to the first over the budget in a second
    // run (a first run also pays for compiling kernels and growing buffers), and at least
    // two sizes: the latency model needs two to tell a batch's fixed cost from its rows'.
    let mut keep = samples.len();
    let mut times = vec![Vec::with_capacity(ROUNDS + 1); samples.len()];
    for (i, sample) in samples.iter().enumerate() {
        if i >= keep {
            break;
        }
        let (over, took) = match over_budget(model, sample, width, limits.p99) {
            Ok(run) => run,
            Err(e) => return skip_variable_shapes(model, e),
        };
        times[i].push(took);
        if over && keep == samples.len() {
            keep = (i + 1).max(2);
        }
    }
    samples.truncate(keep);
    times.truncate(keep);
    let mut timed_rounds = 0;
    for round in 1..=ROUNDS {
        if round > 1 && start.elapsed() >= limits.budget {
            break;
        }
        for (i, sample) in samples.iter().enumerate() {
            let t = Instant::now();
            if let Err(e) = run_sample(model, sample, width) {
                return skip_variable_shapes(model, e);
            }
            times[i].push(t.elapsed());
        }
        timed_rounds = round;
    }
    let fastest = samples
        .iter()
        .zip(times)
        .map(|(sample, t)| (sample.rows(), t.into_iter().min().unwrap_or_default()))
        .collect();
    Ok(Warmup {
        fastest,
        timed_rounds,
    })
}

/// Runs `sample` once, and again if that took longer than `p99`: whether the last run did
/// too, and how long it took.
fn over_budget(
    model: &mut dyn Model,
    sample: &Sample,
    width: usize,
    p99: Duration,
) -> Result<(bool, Duration), String> {
    let mut took = Duration::ZERO;
    for _ in 0..2 {
        let t = Instant::now();
        run_sample(model, sample, width)?;
        took = t.elapsed();
        if took <= p99 {
            return Ok((false, took));
        }
    }
    Ok((true, took))
}

/// A failed warm-up batch: an error, except for a model with variable dimensions, whose
/// warm-up inputs at 1 may be no size it accepts; its latency model then learns from the
/// first batches instead.
fn skip_variable_shapes(model: &dyn Model, error: String) -> Result<Warmup, String> {
    if !variable_shapes(&model.input()) {
        return Err(error);
    }
    tracing::warn!(error = %error, "warm-up with variable dimensions at 1 failed; the latency model learns from the first batches instead");
    Ok(Warmup {
        fastest: Vec::new(),
        timed_rounds: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_power_of_two_and_the_maximum() {
        assert_eq!(warmup_buckets(1), vec![1]);
        assert_eq!(warmup_buckets(8), vec![1, 2, 4, 8]);
        assert_eq!(warmup_buckets(100), vec![1, 2, 4, 8, 16, 32, 64, 100]);
    }

    /// A model whose warm-up outlasts the time budget stops after one timed round, with a
    /// time for every batch size; one within it runs all five.
    #[test]
    fn timed_rounds_stop_once_the_budget_is_spent() {
        let checkpoint = models::Checkpoint::random(&[256, 256, 8], models::DType::F32, 3);
        let mut mlp = models::Mlp::new(&checkpoint, &models::Device::Cpu).unwrap();
        let limits = |budget| Limits {
            max_rows: 64,
            max_outputs: 64,
            p99: Duration::from_secs(60),
            budget,
        };
        let all = warm_up_within(&mut mlp, &limits(Duration::from_secs(60))).unwrap();
        assert_eq!(all.timed_rounds, ROUNDS);
        let spent = warm_up_within(&mut mlp, &limits(Duration::ZERO)).unwrap();
        assert_eq!(spent.timed_rounds, 1);
        let sizes = |w: &Warmup| w.fastest.iter().map(|(rows, _)| *rows).collect::<Vec<_>>();
        assert_eq!(sizes(&spent), sizes(&all));
        assert_eq!(sizes(&all), warmup_buckets(64));
    }

    /// Sizes stop growing at the first whose batch outlasts the p99 budget, keeping two at
    /// least: with a budget no batch meets, the two smallest sizes are warmed up.
    #[test]
    fn sizes_stop_at_the_first_over_the_budget() {
        let checkpoint = models::Checkpoint::random(&[256, 256, 8], models::DType::F32, 3);
        let mut mlp = models::Mlp::new(&checkpoint, &models::Device::Cpu).unwrap();
        let limits = Limits {
            max_rows: 64,
            max_outputs: 64,
            p99: Duration::ZERO,
            budget: Duration::from_secs(60),
        };
        let w = warm_up_within(&mut mlp, &limits).unwrap();
        let sizes: Vec<usize> = w.fastest.iter().map(|(rows, _)| *rows).collect();
        assert_eq!(sizes, vec![1, 2]);
        assert_eq!(w.timed_rounds, ROUNDS);
    }

    #[test]
    fn text_batches_are_sized_in_token_units() {
        let text = TextInput {
            max_seq_len: 256,
            vocab_size: 1000,
            type_vocab_size: 2,
            normalize_by_default: true,
            pooling: models::encoder::Pooling::Mean,
            precision: models::DType::F32,
            attention_per_token_pair: 0.0,
            sliding_window: None,
            labels: Vec::new(),
            multi_label: false,
            token_states: false,
            sparse: false,
        };
        let s = text_samples(&text, 1024, 16);
        let sizes: Vec<(usize, usize)> = s
            .iter()
            .map(|s| match s {
                Sample::Text { units, tokens } => (*units, tokens.sequences()),
                Sample::Dense { .. } | Sample::Tensors { .. } => unreachable!(),
            })
            .collect();
        // 32-token sequences: 1 up to 32 units, then one more per 32, at most 16.
        assert_eq!(sizes, vec![(32, 1), (64, 2), (128, 4), (256, 8), (512, 16)]);
    }
}
