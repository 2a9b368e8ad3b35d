//! TEI's `Predict` (a text, or a pair, classified: every label with its score, best first)
//! and `Rerank` (texts scored against a query by a cross-encoder, best first) services.

use tonic::{Request, Response, Status, Streaming};

use super::embed::one_text;
use super::{Answers, Call, Tei, collected, in_order, metadata_of, pb, truncation_of};
use crate::error::ApiError;
use crate::infer::input::Input;
use crate::infer::scores::{self, Activation, checked, labelled, pairs, require_one_label};
use crate::infer::text::classify;
use crate::infer::tokenize::text_model;

/// `inputs` classified, with logits for `raw_scores`, else the model's activation.
async fn predict_inputs(
    call: &Call,
    inputs: Vec<Input>,
    raw_scores: bool,
    truncation: (bool, i32),
) -> Result<pb::PredictResponse, Status> {
    call.run(|version, arrival, wait| async move {
        let truncation = truncation_of(truncation.0, truncation.1)?;
        let out = classify(&version, &arrival, inputs, truncation, wait).await?;
        let input = &text_model(&version)?.input;
        let activation = match raw_scores {
            true => Activation::None,
            false => Activation::of(input),
        };
        let labels = &input.labels;
        let logits = &out.values[..out.width.min(out.values.len())];
        let predictions = labelled(logits, activation, labels, labels.len())
            .into_iter()
            .map(|(score, label)| pb::Prediction {
                score,
                label: label.clone(),
            })
            .collect();
        Ok(pb::PredictResponse {
            predictions,
            metadata: Some(metadata_of(&out.meta)),
        })
    })
    .await
}

async fn predict(call: Call, r: pb::PredictRequest) -> Result<pb::PredictResponse, Status> {
    let inputs = one_text(r.inputs).map_err(|e| super::status_of(&e))?;
    let truncation = (r.truncate, r.truncation_direction);
    predict_inputs(&call, inputs, r.raw_scores, truncation).await
}

async fn predict_pair(
    call: Call,
    r: pb::PredictPairRequest,
) -> Result<pb::PredictResponse, Status> {
    let pair = match <[String; 2]>::try_from(r.inputs) {
        Ok([a, b]) => checked(vec![Input::Pair(a.into(), b)]),
        Err(inputs) => Err(ApiError::invalid(format!(
            "inputs must be a pair of texts, got {} texts",
            inputs.len()
        ))),
    };
    let inputs = pair.map_err(|e| super::status_of(&e))?;
    let truncation = (r.truncate, r.truncation_direction);
    predict_inputs(&call, inputs, r.raw_scores, truncation).await
}

/// What a rerank asks, from one message or a stream of them.
struct Ranking {
    query: String,
    texts: Vec<String>,
    raw_scores: bool,
    return_text: bool,
    truncation: (bool, i32),
}

async fn rerank(call: &Call, r: Ranking) -> Result<pb::RerankResponse, Status> {
    call.run(|version, arrival, wait| async move {
        require_one_label(&version)?;
        let count = r.texts.len();
        let inputs = pairs(&r.query, r.texts.iter().cloned(), count)?;
        let truncation = truncation_of(r.truncation.0, r.truncation.1)?;
        let out = classify(&version, &arrival, inputs, truncation, wait).await?;
        let activation = match r.raw_scores {
            true => Activation::None,
            false => Activation::Sigmoid,
        };
        let ranks = scores::rerank_scores(&out.values, activation)
            .into_iter()
            .map(|(index, score)| pb::Rank {
                index: index as u32,
                text: r.return_text.then(|| r.texts[index].clone()),
                score,
            })
            .collect();
        Ok(pb::RerankResponse {
            ranks,
            metadata: Some(metadata_of(&out.meta)),
        })
    })
    .await
}

type Answer<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl pb::predict_server::Predict for Tei {
    async fn predict(&self, req: Request<pb::PredictRequest>) -> Answer<pb::PredictResponse> {
        let call = self.call(&req)?;
        predict(call, req.into_inner()).await.map(Response::new)
    }

    async fn predict_pair(
        &self,
        req: Request<pb::PredictPairRequest>,
    ) -> Answer<pb::PredictResponse> {
        let call = self.call(&req)?;
        predict_pair(call, req.into_inner())
            .await
            .map(Response::new)
    }

    type PredictStreamStream = Answers<pb::PredictResponse>;

    async fn predict_stream(
        &self,
        req: Request<Streaming<pb::PredictRequest>>,
    ) -> Answer<Self::PredictStreamStream> {
        let call = self.stream_call(&req)?;
        Ok(Response::new(in_order(req.into_inner(), call, predict)))
    }

    type PredictPairStreamStream = Answers<pb::PredictResponse>;

    async fn predict_pair_stream(
        &self,
        req: Request<Streaming<pb::PredictPairRequest>>,
    ) -> Answer<Self::PredictPairStreamStream> {
        let call = self.stream_call(&req)?;
        Ok(Response::new(in_order(
            req.into_inner(),
            call,
            predict_pair,
        )))
    }
}

#[tonic::async_trait]
impl pb::rerank_server::Rerank for Tei {
    async fn rerank(&self, req: Request<pb::RerankRequest>) -> Answer<pb::RerankResponse> {
        let call = self.call(&req)?;
        let r = req.into_inner();
        let ranking = Ranking {
            query: r.query,
            texts: r.texts,
            raw_scores: r.raw_scores,
            return_text: r.return_text,
            truncation: (r.truncate, r.truncation_direction),
        };
        rerank(&call, ranking).await.map(Response::new)
    }

    /// The texts of the stream against the first message's query, with its settings.
    async fn rerank_stream(
        &self,
        req: Request<Streaming<pb::RerankStreamRequest>>,
    ) -> Answer<pb::RerankResponse> {
        let call = self.stream_call(&req)?;
        let limit = self.state.config().limits.max_body_bytes;
        let size = |m: &pb::RerankStreamRequest| m.query.len() + m.text.len();
        let messages = collected(req.into_inner(), limit, size).await?;
        let Some(first) = messages.first() else {
            return Err(Status::invalid_argument(
                "the stream holds no text to rerank",
            ));
        };
        let ranking = Ranking {
            query: first.query.clone(),
            raw_scores: first.raw_scores,
            return_text: first.return_text,
            truncation: (first.truncate, first.truncation_direction),
            texts: messages.into_iter().map(|m| m.text).collect(),
        };
        rerank(&call, ranking).await.map(Response::new)
    }
}
