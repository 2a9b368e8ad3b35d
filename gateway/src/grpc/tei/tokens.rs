//! TEI's `Tokenize` service: a text's tokens (each with its bytes of the text), and the
//! text of token ids; neither runs the model. Bounded as HTTP's `/tokenize` and `/decode`:
//! the message's size, and at most [`TOKEN_COUNT_LIMIT`] tokens.

use models::encoder::{EncodeError, TOKEN_COUNT_LIMIT};
use tonic::{Request, Response, Status, Streaming};

use super::embed::one_text;
use super::{Answers, Call, Tei, in_order, pb};
use crate::error::ApiError;
use crate::infer::tokenize::{apply_prompt, inline_or_blocking, text_bytes, text_model};

/// A refusal of a text or of ids: too long, or a fault of the tokenizer.
fn refused(what: &str, e: EncodeError) -> ApiError {
    match e {
        EncodeError::TooLong { max, .. } => {
            ApiError::too_large(format!("the {what} has more than {max} tokens"))
        }
        EncodeError::Tokenizer(why) => {
            ApiError::Tokenizer(format!("the model's tokenizer failed on the {what}: {why}"))
        }
    }
}

async fn tokenize(call: Call, r: pb::EncodeRequest) -> Result<pb::EncodeResponse, Status> {
    call.uncounted(|version| async move {
        let model = text_model(&version)?;
        let mut inputs = one_text(r.inputs)?;
        apply_prompt(model, &mut inputs, r.prompt_name.as_deref())?;
        let bytes = inputs.iter().map(text_bytes).sum();
        let Some(crate::infer::input::Input::Text(text)) = inputs.pop() else {
            return Err(ApiError::invalid("inputs must be a text"));
        };
        let (tokenizer, special) = (model.tokenizer.clone(), r.add_special_tokens);
        let tokens = inline_or_blocking(bytes, move || {
            tokenizer
                .tokens(&text, special)
                .map_err(|e| refused("text", e))
        })
        .await?;
        let tokens = tokens.into_iter().map(|t| pb::SimpleToken {
            id: t.id,
            text: t.text,
            special: t.special,
            start: t.start.map(|s| s as u32),
            stop: t.stop.map(|s| s as u32),
        });
        Ok(pb::EncodeResponse {
            tokens: tokens.collect(),
        })
    })
    .await
}

async fn decode(call: Call, r: pb::DecodeRequest) -> Result<pb::DecodeResponse, Status> {
    call.uncounted(|version| async move {
        let model = text_model(&version)?;
        if r.ids.is_empty() {
            return Err(ApiError::empty("ids holds no token ids"));
        }
        if r.ids.len() > TOKEN_COUNT_LIMIT {
            return Err(ApiError::too_large(format!(
                "ids holds more than {TOKEN_COUNT_LIMIT}; Decode takes at most that many"
            )));
        }
        let vocab = model.input.vocab_size;
        if let Some(id) = r.ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(ApiError::invalid(format!(
                "token id {id} is past the model's vocabulary of {vocab}"
            )));
        }
        let (tokenizer, skip) = (model.tokenizer.clone(), r.skip_special_tokens);
        let ids = r.ids;
        let text = inline_or_blocking(4 * ids.len(), move || {
            tokenizer.decode(&ids, skip).map_err(|e| refused("ids", e))
        })
        .await?;
        Ok(pb::DecodeResponse { text })
    })
    .await
}

type Answer<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl pb::tokenize_server::Tokenize for Tei {
    async fn tokenize(&self, req: Request<pb::EncodeRequest>) -> Answer<pb::EncodeResponse> {
        let call = self.call(&req)?;
        tokenize(call, req.into_inner()).await.map(Response::new)
    }

    type TokenizeStreamStream = Answers<pb::EncodeResponse>;

    async fn tokenize_stream(
        &self,
        req: Request<Streaming<pb::EncodeRequest>>,
    ) -> Answer<Self::TokenizeStreamStream> {
        let call = self.stream_call(&req)?;
        Ok(Response::new(in_order(req.into_inner(), call, tokenize)))
    }

    async fn decode(&self, req: Request<pb::DecodeRequest>) -> Answer<pb::DecodeResponse> {
        let call = self.call(&req)?;
        decode(call, req.into_inner()).await.map(Response::new)
    }

    type DecodeStreamStream = Answers<pb::DecodeResponse>;

    async fn decode_stream(
        &self,
        req: Request<Streaming<pb::DecodeRequest>>,
    ) -> Answer<Self::DecodeStreamStream> {
        let call = self.stream_call(&req)?;
        Ok(Response::new(in_order(req.into_inner(), call, decode)))
    }
}
