//! A tensor model's batch: requests whose non-batch shapes agree run together, their rows
//! joined along the first dimension; each gets exactly its own rows of every output back.
//! A model without a batch dimension runs each request alone, as given.

use std::time::Duration;

use metrics::Histogram;
use models::Model;
use seam::{Signature, Tensor};
use tokio::time::Instant;

use super::{Replies, WorkerSpec};
use crate::batching::task::WorkerDone;
use crate::batching::{Completed, Payload, Pending};
use crate::infer::outcome::InferError;

/// What decides whether two requests can share a forward pass: each input's name and
/// shape past the batch dimension.
type ShapeKey = Vec<(String, Vec<usize>)>;

fn shape_key(tensors: &[Tensor]) -> ShapeKey {
    let mut key: ShapeKey = tensors
        .iter()
        .map(|t| (t.name.clone(), t.shape.get(1..).unwrap_or(&[]).to_vec()))
        .collect();
    key.sort();
    key
}

fn tensors_of(p: &Pending) -> &[Tensor] {
    match &p.input {
        Payload::Tensors(t) => t,
        _ => &[],
    }
}

/// The requests in groups that run together, in the order their first member was queued.
fn groups(live: Vec<Pending>, batched: bool) -> Vec<Vec<Pending>> {
    let mut groups: Vec<(ShapeKey, Vec<Pending>)> = Vec::new();
    for p in live {
        let key = shape_key(tensors_of(&p));
        match groups.iter_mut().find(|(k, _)| batched && *k == key) {
            Some((_, members)) => members.push(p),
            None => groups.push((key, vec![p])),
        }
    }
    groups.into_iter().map(|(_, members)| members).collect()
}

/// The group's inputs: a lone request's own, as they are, or every request's joined by
/// name.
fn joined_inputs(group: &[Pending]) -> std::borrow::Cow<'_, [Tensor]> {
    let first = tensors_of(&group[0]);
    if group.len() == 1 {
        return std::borrow::Cow::Borrowed(first);
    }
    let joined = first
        .iter()
        .map(|t| {
            let parts: Vec<&Tensor> = group
                .iter()
                .filter_map(|p| tensors_of(p).iter().find(|x| x.name == t.name))
                .collect();
            Tensor::concat(&parts)
        })
        .collect();
    std::borrow::Cow::Owned(joined)
}

/// Runs a released batch, group by group, and answers each request.
pub fn run(
    spec: &WorkerSpec,
    model: &mut dyn Model,
    signature: &Signature,
    live: Vec<Pending>,
    started_at: Instant,
    compute_histogram: &Histogram,
) -> (WorkerDone, Replies) {
    let rows: usize = live.iter().map(|p| p.rows).sum();
    let outputs: Vec<&str> = signature.outputs.iter().map(|o| o.name.as_str()).collect();
    let mut compute = Duration::ZERO;
    let mut latencies = Vec::with_capacity(live.len());
    let mut replies = Vec::with_capacity(live.len());
    for group in groups(live, signature.batched) {
        let started = std::time::Instant::now();
        let inputs = joined_inputs(&group);
        let group_rows: usize = group.iter().map(|p| p.rows).sum();
        let result = super::catch(|| model.forward_tensors(&inputs, &outputs))
            .and_then(|all| rows_agree(all, group_rows, signature.batched));
        let took = started.elapsed();
        compute += took;
        spec.stats
            .executed(group_rows, Duration::ZERO, took, Duration::ZERO);
        let finished = Instant::now();
        let shares: Vec<Result<Vec<Tensor>, String>> =
            match result.and_then(|all| split(all, &group, signature.batched)) {
                Ok(shares) => shares.into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e); group.len()],
            };
        for (p, share) in group.into_iter().zip(shares) {
            latencies.push(finished.saturating_duration_since(p.enqueued));
            let reply = share
                .map(|tensors| Completed {
                    output: Vec::new(),
                    tensors,
                    tokens: 0,
                    queue_time: started_at.saturating_duration_since(p.enqueued),
                    compute_time: took,
                })
                .map_err(InferError::Model);
            replies.push((p.reply, reply));
        }
    }
    spec.busy.add(compute);
    compute_histogram.record(compute.as_secs_f64());
    let done = WorkerDone {
        rows,
        compute,
        latencies,
    };
    (done, replies)
}

/// The outputs, if each holds the elements its shape says and, where the model batches, the
/// batch's rows first (a graph that drops or adds rows cannot be split among its requests).
fn rows_agree(all: Vec<Tensor>, rows: usize, batched: bool) -> Result<Vec<Tensor>, String> {
    if let Some(t) = all.iter().find(|t| !t.is_consistent()) {
        return Err(format!(
            "output {:?}: its data does not fill its shape {:?}",
            t.name, t.shape
        ));
    }
    match all
        .iter()
        .find(|t| batched && t.shape.first() != Some(&rows))
    {
        Some(t) => Err(format!(
            "output {:?} has shape {:?}, not the batch's {rows} rows first",
            t.name, t.shape
        )),
        None => Ok(all),
    }
}

/// Each request's rows of the outputs, in the group's order. A lone request (every request
/// of a model without a batch dimension runs alone) takes them whole, without a copy.
fn split(all: Vec<Tensor>, group: &[Pending], batched: bool) -> Result<Vec<Vec<Tensor>>, String> {
    if group.len() == 1 || !batched {
        return Ok(vec![all; group.len()]);
    }
    let mut offset = 0;
    let shares = group
        .iter()
        .map(|p| {
            let share = all
                .iter()
                .map(|t| t.rows(offset, offset + p.rows))
                .collect();
            offset += p.rows;
            share
        })
        .collect();
    Ok(shares)
}

#[cfg(test)]
mod tests {
    use seam::{Buffer, DataType, Tensor, TensorData};
    use tokio::sync::oneshot;
    use tokio::time::Instant;

    use super::*;

    fn request(rows: usize, width: usize) -> Pending {
        let values: Vec<f32> = (0..rows * width).map(|v| v as f32).collect();
        let tensor = Tensor {
            name: "x".into(),
            dtype: DataType::Fp32,
            shape: vec![rows, width],
            data: TensorData::Fixed(Buffer::from_bytes(bytemuck::cast_slice(&values))),
        };
        let (reply, _) = oneshot::channel();
        Pending {
            input: Payload::Tensors(vec![tensor]),
            rows,
            outputs: rows,
            priority: 1,
            enqueued: Instant::now(),
            deadline: None,
            continues: false,
            reply,
        }
    }

    #[test]
    fn only_requests_of_one_shape_share_a_pass() {
        let live = vec![request(1, 3), request(2, 5), request(2, 3), request(1, 5)];
        let sizes = |g: &Vec<Vec<Pending>>| -> Vec<Vec<usize>> {
            g.iter()
                .map(|m| m.iter().map(|p| tensors_of(p)[0].shape[1]).collect())
                .collect()
        };
        let batched = groups(live, true);
        assert_eq!(sizes(&batched), vec![vec![3, 3], vec![5, 5]]);
        let joined = joined_inputs(&batched[0]);
        assert_eq!(joined[0].shape, vec![3, 3]);
        let alone = groups(vec![request(1, 3), request(1, 3)], false);
        assert_eq!(
            alone.len(),
            2,
            "a model without a batch dimension runs each alone"
        );
    }

    #[test]
    fn each_request_gets_its_own_rows_and_a_short_output_is_an_error() {
        let out = Tensor::concat(&[
            &tensors_of(&request(1, 2))[0],
            &tensors_of(&request(2, 2))[0],
        ]);
        let all = rows_agree(vec![out.clone()], 3, true).unwrap();
        let shares = split(all, &[request(1, 2), request(2, 2)], true).unwrap();
        assert_eq!(shares[1][0], out.rows(1, 3));
        assert_eq!(shares[0][0], out.rows(0, 1));
        assert!(
            rows_agree(vec![out], 4, true)
                .unwrap_err()
                .contains("not the batch's 4 rows")
        );
    }
}
