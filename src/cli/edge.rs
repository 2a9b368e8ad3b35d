//! `tandem serve`'s flags for what faces clients besides the APIs: API keys, TLS, CORS,
//! traces and the log's form.

use std::path::PathBuf;

use clap::Args;

#[derive(Clone, Debug, Args)]
pub struct EdgeArgs {
    /// Require `Authorization: Bearer KEY` on every inference route (repeatable; adds to
    /// `api_keys` and `api_keys_file`). A key file keeps keys out of the process list.
    #[arg(long = "api-key", value_name = "KEY")]
    pub api_keys: Vec<String>,

    /// Let browsers call tandem from these origins (`scheme://host[:port]`, comma-separated
    /// or repeated; `*` for any): CORS preflights answered, CORS headers on responses.
    #[arg(
        long = "cors-allow-origin",
        value_name = "ORIGIN",
        value_delimiter = ','
    )]
    pub cors_allow_origins: Vec<String>,

    /// Serve TLS with this certificate chain (PEM), on every listener; read again on SIGHUP.
    #[arg(
        long,
        value_name = "PEM",
        requires = "tls_key",
        env = "TANDEM_TLS_CERT"
    )]
    pub tls_cert: Option<PathBuf>,

    /// The certificate's private key (PEM).
    #[arg(
        long,
        value_name = "PEM",
        requires = "tls_cert",
        env = "TANDEM_TLS_KEY"
    )]
    pub tls_key: Option<PathBuf>,

    /// Require clients to present a certificate signed by one of these CAs (PEM).
    #[arg(
        long,
        value_name = "PEM",
        requires = "tls_cert",
        env = "TANDEM_TLS_CLIENT_CA"
    )]
    pub tls_client_ca: Option<PathBuf>,

    /// Export each request's spans over OTLP/HTTP to this collector (`http://host:4318`).
    #[arg(long, value_name = "URL", env = "TANDEM_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// The `service.name` of the exported spans (default `tandem`).
    #[arg(long, value_name = "NAME", env = "OTEL_SERVICE_NAME")]
    pub otlp_service_name: Option<String>,

    /// Log lines as text, or as JSON objects one a line.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "TANDEM_LOG_FORMAT")]
    pub log_format: LogFormat,

    /// One log line per request: route, status, latency, request id, model.
    #[arg(long)]
    pub access_log: bool,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}
