//! `inference.GRPCInferenceService`: every RPC answered from what HTTP's v2 routes answer
//! from (the registry, the inference core, the repository control), or refused
//! UNIMPLEMENTED where tandem has no such extension. API keys as on HTTP: liveness and
//! readiness are open, the rest take `authorization: Bearer KEY`; load and unload take
//! the admin API's authorization besides.

use std::sync::Arc;

use serde_json::json;
use tonic::{Request, Response, Status};

use super::infer::{self, AnswerStream, Call};
use super::status::{status_of, timeout_of};
use super::{Peer, json, pb};
use crate::error::ApiError;
use crate::http::AppState;
use crate::http::{auth, v2};
use crate::metrics as names;

pub struct Inference {
    pub state: Arc<AppState>,
}

type Answer<T> = Result<Response<T>, Status>;

/// A call that needs one of the API keys, where keys are configured.
pub fn keyed<T>(state: &AppState, req: &Request<T>) -> Result<(), Status> {
    let keys = &state.config().api_keys;
    if auth::authorized_by(keys, authorization(req)) {
        return Ok(());
    }
    metrics::counter!(names::HTTP_UNAUTHORIZED, "family" => "grpc").increment(1);
    Err(Status::unauthenticated(
        "a valid API key is required: send `authorization: Bearer <key>` metadata",
    ))
}

impl Inference {
    fn keyed<T>(&self, req: &Request<T>) -> Result<(), Status> {
        keyed(&self.state, req)
    }

    /// A call that changes what is served: the admin API's token, or a loopback client.
    fn admin<T>(&self, req: &Request<T>) -> Result<(), Status> {
        let peer = req.extensions().get::<Peer>().map(|p| p.0);
        let peer = peer.unwrap_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
        auth::authorize_admin_by(&self.state, authorization(req), peer).map_err(|e| status_of(&e))
    }

    fn call<T>(&self, req: &Request<T>) -> Result<Call, Status> {
        let began = super::Began::of(req);
        let timeout = timeout_of(req.metadata()).map_err(|e| status_of(&e))?;
        Ok(Call {
            began,
            deadline: timeout.and_then(|t| began.checked_add(t)),
        })
    }
}

fn authorization<T>(req: &Request<T>) -> Option<&str> {
    req.metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
}

/// `""` names the newest version, as Triton reads it.
fn version(v: &str) -> Option<&str> {
    (!v.is_empty()).then_some(v)
}

fn answer<T>(result: Result<T, ApiError>) -> Answer<T> {
    result.map(Response::new).map_err(|e| status_of(&e))
}

/// What tandem has no extension for.
fn unimplemented<T>(what: &str) -> Answer<T> {
    Err(Status::unimplemented(format!(
        "tandem has no {what} extension; send tensors in the request (raw_input_contents)"
    )))
}

#[tonic::async_trait]
impl pb::grpc_inference_service_server::GrpcInferenceService for Inference {
    async fn server_live(
        &self,
        _: Request<pb::ServerLiveRequest>,
    ) -> Answer<pb::ServerLiveResponse> {
        Ok(Response::new(pb::ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        _: Request<pb::ServerReadyRequest>,
    ) -> Answer<pb::ServerReadyResponse> {
        let ready = self.state.is_ready();
        Ok(Response::new(pb::ServerReadyResponse { ready }))
    }

    async fn model_ready(
        &self,
        req: Request<pb::ModelReadyRequest>,
    ) -> Answer<pb::ModelReadyResponse> {
        self.keyed(&req)?;
        let r = req.get_ref();
        let serving = self.state.registry.resolve(&r.name, version(&r.version));
        let ready = serving.is_ok()
            && !self
                .state
                .draining
                .load(std::sync::atomic::Ordering::Acquire);
        Ok(Response::new(pb::ModelReadyResponse { ready }))
    }

    async fn server_metadata(
        &self,
        req: Request<pb::ServerMetadataRequest>,
    ) -> Answer<pb::ServerMetadataResponse> {
        self.keyed(&req)?;
        Ok(Response::new(pb::ServerMetadataResponse {
            name: "tandem".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: v2::EXTENSIONS.iter().map(|e| e.to_string()).collect(),
        }))
    }

    async fn model_metadata(
        &self,
        req: Request<pb::ModelMetadataRequest>,
    ) -> Answer<pb::ModelMetadataResponse> {
        self.keyed(&req)?;
        let r = req.get_ref();
        answer(
            v2::metadata_json(&self.state, &r.name, version(&r.version))
                .and_then(|j| json::message("ModelMetadataResponse", j)),
        )
    }

    async fn model_infer(
        &self,
        req: Request<pb::ModelInferRequest>,
    ) -> Answer<pb::ModelInferResponse> {
        self.keyed(&req)?;
        let call = self
            .call(&req)
            .inspect_err(|_| infer::refused_unread(&req))?;
        let (response, cache) = infer::infer(&self.state, req.into_inner(), call)
            .await
            .map_err(|e| status_of(&e))?;
        let mut response = Response::new(response);
        if let Some(outcome) = cache {
            let value = tonic::metadata::MetadataValue::from_static(outcome);
            response.metadata_mut().insert("x-tandem-cache", value);
        }
        Ok(response)
    }

    type ModelStreamInferStream = AnswerStream;

    async fn model_stream_infer(
        &self,
        req: Request<tonic::Streaming<pb::ModelInferRequest>>,
    ) -> Answer<AnswerStream> {
        self.keyed(&req)?;
        let call = self.call(&req)?;
        Ok(Response::new(infer::stream(
            self.state.clone(),
            req.into_inner(),
            call,
        )))
    }

    async fn model_config(
        &self,
        req: Request<pb::ModelConfigRequest>,
    ) -> Answer<pb::ModelConfigResponse> {
        self.keyed(&req)?;
        let r = req.get_ref();
        let config = v2::config_json(&self.state, &r.name, version(&r.version))
            .and_then(|j| json::message("ModelConfig", j));
        answer(config.map(|config| pb::ModelConfigResponse {
            config: Some(config),
        }))
    }

    async fn model_statistics(
        &self,
        req: Request<pb::ModelStatisticsRequest>,
    ) -> Answer<pb::ModelStatisticsResponse> {
        self.keyed(&req)?;
        let r = req.get_ref();
        let model = (!r.name.is_empty()).then_some(r.name.as_str());
        answer(
            v2::statistics_json(&self.state, model, version(&r.version))
                .and_then(|j| json::message("ModelStatisticsResponse", j)),
        )
    }

    async fn repository_index(
        &self,
        req: Request<pb::RepositoryIndexRequest>,
    ) -> Answer<pb::RepositoryIndexResponse> {
        self.keyed(&req)?;
        let entries = v2::index_entries(&self.state, req.get_ref().ready);
        answer(json::message(
            "RepositoryIndexResponse",
            json!({ "models": entries }),
        ))
    }

    async fn repository_model_load(
        &self,
        req: Request<pb::RepositoryModelLoadRequest>,
    ) -> Answer<pb::RepositoryModelLoadResponse> {
        self.keyed(&req)?;
        self.admin(&req)?;
        let r = req.get_ref();
        let parameters = r.parameters.keys().map(String::as_str);
        let loaded = v2::load_model(&self.state, &r.model_name, parameters).await;
        answer(loaded.map(|()| pb::RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        req: Request<pb::RepositoryModelUnloadRequest>,
    ) -> Answer<pb::RepositoryModelUnloadResponse> {
        self.keyed(&req)?;
        self.admin(&req)?;
        let unloaded = v2::unload_model(&self.state, &req.get_ref().model_name).await;
        answer(unloaded.map(|()| pb::RepositoryModelUnloadResponse {}))
    }

    async fn system_shared_memory_status(
        &self,
        _: Request<pb::SystemSharedMemoryStatusRequest>,
    ) -> Answer<pb::SystemSharedMemoryStatusResponse> {
        unimplemented("system shared-memory")
    }

    async fn system_shared_memory_register(
        &self,
        _: Request<pb::SystemSharedMemoryRegisterRequest>,
    ) -> Answer<pb::SystemSharedMemoryRegisterResponse> {
        unimplemented("system shared-memory")
    }

    async fn system_shared_memory_unregister(
        &self,
        _: Request<pb::SystemSharedMemoryUnregisterRequest>,
    ) -> Answer<pb::SystemSharedMemoryUnregisterResponse> {
        unimplemented("system shared-memory")
    }

    async fn cuda_shared_memory_status(
        &self,
        _: Request<pb::CudaSharedMemoryStatusRequest>,
    ) -> Answer<pb::CudaSharedMemoryStatusResponse> {
        unimplemented("CUDA shared-memory")
    }

    async fn cuda_shared_memory_register(
        &self,
        _: Request<pb::CudaSharedMemoryRegisterRequest>,
    ) -> Answer<pb::CudaSharedMemoryRegisterResponse> {
        unimplemented("CUDA shared-memory")
    }

    async fn cuda_shared_memory_unregister(
        &self,
        _: Request<pb::CudaSharedMemoryUnregisterRequest>,
    ) -> Answer<pb::CudaSharedMemoryUnregisterResponse> {
        unimplemented("CUDA shared-memory")
    }

    async fn trace_setting(
        &self,
        _: Request<pb::TraceSettingRequest>,
    ) -> Answer<pb::TraceSettingResponse> {
        Err(Status::unimplemented(
            "tandem has no trace setting extension: traces go over OTLP (otlp_endpoint)",
        ))
    }

    async fn log_settings(
        &self,
        _: Request<pb::LogSettingsRequest>,
    ) -> Answer<pb::LogSettingsResponse> {
        Err(Status::unimplemented(
            "tandem has no log settings extension: set the level with PUT /admin/log",
        ))
    }
}
