//! Every token's state instead of a pooled vector (TEI's `/embed_all`): against the float64
//! reference's final states (tests/python/bert_reference.py `states`, run with
//! $TANDEM_PYTHON), mixed in one batch with pooled sequences, on one thread and in groups of
//! sequences per thread; and refused where the states are not what the model answers with.

use kernels::Device;
use models::encoder::family::Family;
use models::encoder::synthetic::SyntheticSpec;
use models::encoder::{Encoded, Encoder, PackedTokens, Pooling};
use models::{Batch, Model, ModelError};

use crate::support::embeddings::{
    ask_transformers, cosine, dense, random_sequences, reference, reference_states,
    synthetic_sequences, worst_relative_difference,
};
use crate::support::{python, synthetic};

/// `seqs` packed, those at even positions keeping their every state.
fn every_other_keeps_states(seqs: &[Encoded]) -> PackedTokens {
    let mut kept = PackedTokens::new();
    let mut batch = PackedTokens::new();
    for (i, e) in seqs.iter().enumerate() {
        match i % 2 {
            0 => {
                kept.clear();
                kept.push(e);
                kept.keep_all_states();
                batch.push_sequence_of(&kept, 0);
            }
            _ => batch.push(e),
        }
    }
    batch
}

fn run(encoder: &mut Encoder, tokens: &PackedTokens) -> Vec<f32> {
    let mut out = vec![f32::NAN; tokens.output_rows() * encoder.output_width()];
    encoder.forward_packed(tokens, &mut out).unwrap();
    out
}

/// Kept states and pooled vectors, in batch order, each within 0.99999 cosine of the
/// reference's.
fn check_against_reference(test: &str, spec: SyntheticSpec) {
    let Some(python) = python(test) else { return };
    let dir = synthetic(test, &spec);
    let seqs = synthetic_sequences(&dir.0, spec.max_seq_length);
    let mut encoder = Encoder::load(&dir.0, &Device::Cpu).unwrap();
    assert!(encoder.serves_token_states(), "{test}");
    let batch = every_other_keeps_states(&seqs);
    let got = run(&mut encoder, &batch);
    let states = reference_states(&python, &dir.0, &seqs);
    let pooled = reference(&python, &dir.0, &seqs, spec.pooling);
    let h = encoder.hidden();
    let mut rows = got.chunks_exact(h);
    for (i, seq) in seqs.iter().enumerate() {
        let want: Vec<&Vec<f64>> = match batch.keeps_states(i) {
            true => states[i].iter().collect(),
            false => vec![&pooled[i]],
        };
        assert_eq!(batch.output_rows_of(i), want.len(), "{test}: sequence {i}");
        for (t, w) in want.into_iter().enumerate() {
            let c = cosine(rows.next().unwrap(), w);
            assert!(
                c >= 0.99999,
                "{test}: sequence {i} ({} tokens), row {t}: cosine {c}",
                seq.ids.len()
            );
        }
    }
    assert!(rows.next().is_none(), "{test}: rows left over");
}

#[test]
fn bert_token_states_match_the_reference_beside_pooled_sequences() {
    check_against_reference("token-states-bert", SyntheticSpec::default());
}

#[test]
fn bert_cls_token_states_match_the_reference() {
    let spec = SyntheticSpec {
        pooling: Pooling::Cls,
        seed: 8,
        ..SyntheticSpec::default()
    };
    check_against_reference("token-states-bert-cls", spec);
}

#[test]
fn modernbert_token_states_match_the_reference_beside_pooled_sequences() {
    let spec = SyntheticSpec {
        family: Family::ModernBert,
        ..SyntheticSpec::default()
    };
    check_against_reference("token-states-modernbert", spec);
}

/// A batch run a group of sequences per thread puts each sequence's rows where they belong:
/// the same as each sequence run alone.
#[test]
fn groups_of_sequences_per_thread_keep_states_in_place() {
    let spec = SyntheticSpec::default();
    let dir = synthetic("token-states-groups", &spec);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    pool.install(|| {
        let mut encoder = Encoder::load(&dir.0, &Device::Cpu).unwrap();
        encoder.set_threads(2);
        // Even lengths, so that the batch splits into one group per thread.
        let seqs = random_sequences(&[9, 7, 9, 7, 8, 8], 5, 60, 2, 3);
        let batch = every_other_keeps_states(&seqs);
        let together = run(&mut encoder, &batch);
        let mut alone = Vec::new();
        for i in 0..batch.sequences() {
            alone.extend(run(&mut encoder, &batch.sequences_in(i..i + 1)));
        }
        assert_eq!(together.len(), (9 + 1 + 9 + 1 + 8 + 1) * encoder.hidden());
        let worst = worst_relative_difference(&together, &alone, encoder.hidden());
        assert!(worst <= 1e-5, "in groups and alone differ by {worst:e}");
    });
}

/// Behind the model seam a batch's output rows count every kept state.
#[test]
fn the_model_seam_counts_a_row_per_kept_state() {
    let dir = synthetic("token-states-seam", &SyntheticSpec::default());
    let mut model: Box<dyn Model> = models::load(&dir.0, &Device::Cpu).unwrap();
    let models::InputKind::Text(input) = model.input() else {
        panic!("a text encoder takes texts")
    };
    assert!(input.token_states);
    let mut batch = every_other_keeps_states(&random_sequences(&[5, 4, 3], 5, 60, 2, 3));
    assert_eq!(Batch::Tokens(&batch).rows(), 5 + 1 + 3);
    let mut out = vec![0.0; 9 * model.output_width()];
    model.forward(Batch::Tokens(&batch), &mut out).unwrap();
    // One mark too few is refused, not read past.
    batch.states.pop();
    let err = model.forward(Batch::Tokens(&batch), &mut out).unwrap_err();
    assert!(matches!(err, ModelError::InvalidTokens(_)), "{err}");
}

/// With Dense modules after pooling, or a classifier's head, the model's outputs are not
/// its token states: a batch asking for them is refused, and the model says it does not
/// serve them.
#[test]
fn token_states_are_refused_where_the_outputs_are_not_states() {
    use models::encoder::dense_module::DenseActivation;
    let with_dense = SyntheticSpec {
        dense: vec![dense(16, true, DenseActivation::Tanh)],
        ..SyntheticSpec::default()
    };
    let classifier = SyntheticSpec {
        labels: 3,
        ..SyntheticSpec::default()
    };
    for (tag, spec) in [("dense", with_dense), ("classifier", classifier)] {
        let dir = synthetic(&format!("token-states-refused-{tag}"), &spec);
        let mut encoder = Encoder::load(&dir.0, &Device::Cpu).unwrap();
        assert!(!encoder.serves_token_states(), "{tag}");
        assert!(!encoder.text_input().token_states, "{tag}");
        let batch = every_other_keeps_states(&random_sequences(&[5, 4], 5, 60, 2, 3));
        let mut out = vec![0.0; batch.output_rows() * encoder.output_width()];
        let err = encoder.forward_packed(&batch, &mut out).unwrap_err();
        assert!(
            err.to_string().contains("every token's state"),
            "{tag}: {err}"
        );
    }
}

/// Against transformers' `AutoModel` (its `last_hidden_state`, tests/python/
/// transformers_check.py `states`), BERT and ModernBERT: within 1e-4 of each state's
/// largest value. Those libraries are not in the tests' environment, so this runs by hand:
/// `TANDEM_TRANSFORMERS_PYTHON=PYTHON cargo test --release -p models --test
/// encoder_token_states -- --ignored --nocapture`.
#[test]
#[ignore = "needs torch and transformers"]
fn token_states_match_transformers() {
    for family in [Family::Bert, Family::ModernBert] {
        let spec = SyntheticSpec {
            family,
            ..SyntheticSpec::default()
        };
        let dir = synthetic(&format!("token-states-hf-{family:?}"), &spec);
        let seqs = synthetic_sequences(&dir.0, spec.max_seq_length);
        let mut encoder = Encoder::load(&dir.0, &Device::Cpu).unwrap();
        let mut batch = PackedTokens::new();
        seqs.iter().for_each(|e| batch.push(e));
        batch.keep_all_states();
        let got = run(&mut encoder, &batch);
        let want: Vec<Vec<Vec<f64>>> = ask_transformers("states", &dir.0, &seqs, "states");
        let flat: Vec<f32> = want.iter().flatten().flatten().map(|&v| v as f32).collect();
        let worst = worst_relative_difference(&got, &flat, encoder.hidden());
        println!(
            "{family:?}: {} texts, worst relative difference {worst:.1e}",
            want.len()
        );
        assert!(worst <= 1e-4, "{family:?}: {worst}");
    }
}
