//! A classifier's logits as scores: the activation a request asks for (or the model's), its
//! labels best first, a cross-encoder's pairs ranked; and the inputs a ranking scores.

use std::sync::Arc;

use super::input::{Input, MAX_TEXTS};
use super::tokenize::text_model;
use crate::error::ApiError;
use crate::lifecycle::registry::ModelVersion;

/// How logits become scores.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Sigmoid,
    Softmax,
    None,
}

impl Activation {
    /// The model's own: sigmoid for one label or a multi-label model, softmax otherwise.
    pub fn of(input: &models::TextInput) -> Activation {
        match input.labels.len() == 1 || input.multi_label {
            true => Activation::Sigmoid,
            false => Activation::Softmax,
        }
    }
}

/// Refuses a classifier of several labels: reranking takes one score per pair. (A model
/// of embeddings is refused where it runs: `Task::Classify`.)
pub fn require_one_label(version: &ModelVersion) -> Result<(), ApiError> {
    let labels = text_model(version)?.input.labels.len();
    if labels > 1 {
        return Err(ApiError::invalid(format!(
            "model {:?} has {labels} labels; reranking takes a cross-encoder, a classifier \
             with one score (use /predict for its labels)",
            version.name
        )));
    }
    Ok(())
}

/// `(index, score)` of each pair from its one logit, best first (ties in the order given).
pub fn rerank_scores(logits: &[f32], activation: Activation) -> Vec<(usize, f32)> {
    let mut ranked: Vec<(usize, f32)> = logits
        .iter()
        .map(|&logit| scores(&[logit], activation)[0])
        .enumerate()
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked
}

/// The pairs of `query` and each of `texts` (`count` of them sent, of which these were
/// kept), checked by [`checked`]. They share one copy of the query.
pub fn pairs(
    query: &str,
    texts: impl Iterator<Item = String>,
    count: usize,
) -> Result<Vec<Input>, ApiError> {
    if count > MAX_TEXTS {
        return Err(too_many(count));
    }
    let query: Arc<str> = query.into();
    checked(texts.map(|t| Input::Pair(query.clone(), t)).collect())
}

pub fn too_many(n: usize) -> ApiError {
    let refusal = match n {
        0 => ApiError::empty,
        _ => ApiError::too_large,
    };
    refusal(format!(
        "a request scores 1 to {MAX_TEXTS} texts or pairs, this one {n}"
    ))
}

/// `inputs` if there are 1 to [`MAX_TEXTS`] of them and none is empty (a pair is empty
/// when both its texts are, as TEI has it: one empty document must not fail a rerank).
pub fn checked(inputs: Vec<Input>) -> Result<Vec<Input>, ApiError> {
    if inputs.is_empty() || inputs.len() > MAX_TEXTS {
        return Err(too_many(inputs.len()));
    }
    let empty = |input: &Input| match input {
        Input::Text(t) => t.is_empty(),
        Input::Pair(a, b) => a.is_empty() && b.is_empty(),
        Input::Ids(_) => false,
    };
    match inputs.iter().position(empty) {
        Some(i) => Err(ApiError::empty(format!("input {i} holds an empty text"))),
        None => Ok(inputs),
    }
}

/// One sequence's labels with their scores, best first, at most `top_k`.
pub fn labelled<'a>(
    logits: &[f32],
    activation: Activation,
    labels: &'a [String],
    top_k: usize,
) -> Vec<(f32, &'a String)> {
    let mut scored: Vec<(f32, &String)> =
        scores(logits, activation).into_iter().zip(labels).collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.truncate(top_k);
    scored
}

/// One sequence's scores from its logits.
pub fn scores(logits: &[f32], activation: Activation) -> Vec<f32> {
    match activation {
        Activation::None => logits.to_vec(),
        Activation::Sigmoid => logits.iter().map(|&x| sigmoid(x)).collect(),
        Activation::Softmax => {
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let exp: Vec<f64> = logits.iter().map(|&x| ((x - max) as f64).exp()).collect();
            let sum: f64 = exp.iter().sum();
            exp.iter().map(|e| (e / sum) as f32).collect()
        }
    }
}

fn sigmoid(x: f32) -> f32 {
    (1.0 / (1.0 + (-(x as f64)).exp())) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_sigmoid_softmax_or_the_logits() {
        assert_eq!(scores(&[0.0], Activation::Sigmoid), vec![0.5]);
        let s = scores(&[1.0, 1.0, 1.0 + 2f32.ln()], Activation::Softmax);
        let want = [0.25, 0.25, 0.5];
        assert!(
            s.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6),
            "{s:?}"
        );
        // Large logits neither overflow nor lose the order.
        let s = scores(&[1000.0, 999.0], Activation::Softmax);
        assert!(s[0] > s[1] && s.iter().all(|v| v.is_finite()), "{s:?}");
        assert_eq!(scores(&[-3.5, 2.0], Activation::None), vec![-3.5, 2.0]);
    }
}
