//! TEI's `Embed` service: one text a request, its embedding (`Embed`), its sparse weights
//! above zero (`EmbedSparse`), or every token's state (`EmbedAll`); each also streamed.

use tonic::{Request, Response, Status, Streaming};

use super::{Answers, Call, Tei, in_order, metadata_of, pb, truncation_of};
use crate::infer::dimensions::Asked;
use crate::infer::input::Input;
use crate::infer::text::{self, Task, TextRequest};
use crate::protocol::text_inputs::Inputs;

/// A request's one text, checked as HTTP's `inputs` are (not empty).
pub(super) fn one_text(text: String) -> Result<Vec<Input>, crate::error::ApiError> {
    Inputs::List(vec![Input::Text(text)]).checked("inputs")
}

async fn embed(call: Call, r: pb::EmbedRequest) -> Result<pb::EmbedResponse, Status> {
    call.run(|version, arrival, wait| async move {
        let ask = TextRequest {
            inputs: one_text(r.inputs)?,
            truncation: truncation_of(r.truncate, r.truncation_direction)?,
            normalize: Some(r.normalize.unwrap_or(true)),
            prompt_name: r.prompt_name,
            task: Task::Embed,
            dimensions: Asked {
                field: "dimensions",
                size: r.dimensions.map(u64::from),
            },
        };
        let e = text::run(&version, &arrival, ask, wait).await?;
        Ok(pb::EmbedResponse {
            metadata: Some(metadata_of(&e.meta)),
            embeddings: e.values,
        })
    })
    .await
}

/// A text's values for `task` (sparse weights or token states: neither normalised nor cut).
async fn unpooled(
    call: &Call,
    inputs: String,
    truncation: (bool, i32),
    prompt_name: Option<String>,
    task: Task,
) -> Result<text::TextAnswer, Status> {
    call.run(|version, arrival, wait| async move {
        let ask = TextRequest {
            inputs: one_text(inputs)?,
            truncation: truncation_of(truncation.0, truncation.1)?,
            normalize: Some(false),
            prompt_name,
            task,
            dimensions: Asked::NONE,
        };
        text::run(&version, &arrival, ask, wait).await
    })
    .await
}

async fn embed_sparse(
    call: Call,
    r: pb::EmbedSparseRequest,
) -> Result<pb::EmbedSparseResponse, Status> {
    let truncation = (r.truncate, r.truncation_direction);
    let e = unpooled(&call, r.inputs, truncation, r.prompt_name, Task::Sparse).await?;
    let above_zero = (e.values.iter().enumerate()).filter(|(_, w)| **w > 0.0);
    Ok(pb::EmbedSparseResponse {
        sparse_embeddings: above_zero
            .map(|(index, &value)| pb::SparseValue {
                index: index as u32,
                value,
            })
            .collect(),
        metadata: Some(metadata_of(&e.meta)),
    })
}

async fn embed_all(call: Call, r: pb::EmbedAllRequest) -> Result<pb::EmbedAllResponse, Status> {
    let truncation = (r.truncate, r.truncation_direction);
    let e = unpooled(
        &call,
        r.inputs,
        truncation,
        r.prompt_name,
        Task::TokenStates,
    )
    .await?;
    Ok(pb::EmbedAllResponse {
        token_embeddings: (e.values.chunks_exact(e.width.max(1)))
            .map(|state| pb::TokenEmbedding {
                embeddings: state.to_vec(),
            })
            .collect(),
        metadata: Some(metadata_of(&e.meta)),
    })
}

type Answer<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl pb::embed_server::Embed for Tei {
    async fn embed(&self, req: Request<pb::EmbedRequest>) -> Answer<pb::EmbedResponse> {
        let call = self.call(&req)?;
        embed(call, req.into_inner()).await.map(Response::new)
    }

    type EmbedStreamStream = Answers<pb::EmbedResponse>;

    async fn embed_stream(
        &self,
        req: Request<Streaming<pb::EmbedRequest>>,
    ) -> Answer<Self::EmbedStreamStream> {
        let call = self.stream_call(&req)?;
        Ok(Response::new(in_order(req.into_inner(), call, embed)))
    }

    async fn embed_sparse(
        &self,
        req: Request<pb::EmbedSparseRequest>,
    ) -> Answer<pb::EmbedSparseResponse> {
        let call = self.call(&req)?;
        embed_sparse(call, req.into_inner())
            .await
            .map(Response::new)
    }

    type EmbedSparseStreamStream = Answers<pb::EmbedSparseResponse>;

    async fn embed_sparse_stream(
        &self,
        req: Request<Streaming<pb::EmbedSparseRequest>>,
    ) -> Answer<Self::EmbedSparseStreamStream> {
        let call = self.stream_call(&req)?;
        Ok(Response::new(in_order(
            req.into_inner(),
            call,
            embed_sparse,
        )))
    }

    async fn embed_all(&self, req: Request<pb::EmbedAllRequest>) -> Answer<pb::EmbedAllResponse> {
        let call = self.call(&req)?;
        embed_all(call, req.into_inner()).await.map(Response::new)
    }

    type EmbedAllStreamStream = Answers<pb::EmbedAllResponse>;

    async fn embed_all_stream(
        &self,
        req: Request<Streaming<pb::EmbedAllRequest>>,
    ) -> Answer<Self::EmbedAllStreamStream> {
        let call = self.stream_call(&req)?;
        Ok(Response::new(in_order(req.into_inner(), call, embed_all)))
    }
}
