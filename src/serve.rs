//! `tandem serve`: assembles the configuration from file, flags and environment, binds the
//! listener, and runs the gateway until SIGTERM or ctrl-c.

use std::path::Path;

use anyhow::Context;
use gateway::Config;
use gateway::config::{CpuPrecision, DEFAULT_CONFIG, ModelOverrides, PolicyKind};
use tokio::sync::{mpsc, watch};

use crate::cli::{CpuPrecisionArg, EdgeArgs, PolicyArg, ServeArgs};

/// On SIGHUP, builds the configuration again — file, flags, environment — and hands it to
/// the gateway.
async fn reload_on_sighup(args: ServeArgs, reload: mpsc::Sender<Config>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP: config reload disabled");
        return;
    };
    while hup.recv().await.is_some() {
        tracing::info!(config = ?args.config, "SIGHUP: reloading the configuration");
        match build_config(&args) {
            Ok(c) => {
                if reload.send(c).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "config reload failed; keeping the running configuration")
            }
        }
    }
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = build_config(&args)?;
    // This executable is the coordinator's guardian too (`main`), so that a trainer it
    // stopped is continued even if this process is killed.
    if let Ok(exe) = std::env::current_exe() {
        gateway::guardian::enable(exe);
    }
    raise_open_file_limit(config.limits.max_connections as u64 + FILES_BESIDE_CONNECTIONS);
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.http_threads {
        runtime.worker_threads(n.max(1));
    }
    let runtime = runtime.enable_all().thread_name("tandem-http").build()?;
    let args_for_reload = args.clone();
    runtime.block_on(async move {
        let args = args_for_reload;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let addr = listener.local_addr()?;
        tracing::info!(%addr, "listening");
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            let _ = tx.send(true);
        });
        let (reload_tx, reload_rx) = mpsc::channel(1);
        tokio::spawn(reload_on_sighup(args, reload_tx));
        gateway::run_with_reload(config, listener, rx, reload_rx).await?;
        Ok(())
    })
}

/// Descriptors the server needs besides one per connection: listeners, the runtime's
/// epoll and wakers, trainer sockets, repository scans, model files while they load.
const FILES_BESIDE_CONNECTIONS: u64 = 256;

/// Raises the soft limit on open files to `needed`, as far as the hard limit allows. Many
/// systems start processes at a soft limit of 1,024, below the default `max_connections`
/// plus what the server needs besides: past it `accept` fails and clients wait in the
/// backlog while the server has connection permits to spare.
fn raise_open_file_limit(needed: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct through a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    if limit.rlim_cur >= needed {
        return;
    }
    let raised = libc::rlimit {
        rlim_cur: needed.min(limit.rlim_max),
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit reads one rlimit struct through a valid pointer; a soft limit at
    // or under the hard one needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "cannot raise the open-file limit");
        return;
    }
    if raised.rlim_cur < needed {
        tracing::warn!(
            limit = raised.rlim_cur,
            needed,
            "the open-file limit (hard) is below what limits.max_connections needs; beyond it new connections wait in the backlog (raise it with `ulimit -Hn` or LimitNOFILE=)"
        );
    } else {
        tracing::info!(
            from = limit.rlim_cur,
            to = raised.rlim_cur,
            "raised the open-file limit"
        );
    }
}

fn build_config(args: &ServeArgs) -> anyhow::Result<Config> {
    let mut config = match &args.config {
        Some(path) => Config::from_file(path)?,
        None if args.models.is_empty() && args.model_repository.is_none() => Config::from_toml(
            DEFAULT_CONFIG,
            "the built-in config/tandem.toml",
            Path::new("."),
        )?,
        None => Config::default(),
    };
    if let Some(l) = args.listen {
        config.listen = l;
    }
    if let Some(d) = &args.device {
        config.device = d.clone();
    }
    if let Some(r) = &args.model_repository {
        config.model_repository = Some(r.clone());
    }
    if let Some(s) = &args.coloc_socket {
        config.coloc.socket = Some(s.clone());
    }
    if let Some(m) = args.metrics_listen {
        config.metrics_listen = Some(m);
    }
    if let Some(crate::cli::GrpcListen(g)) = args.grpc_listen {
        config.grpc_listen = g;
    }
    if let Some(ms) = args.p99_ms {
        config.defaults.p99_ms = ms;
    }
    if let Some(p) = args.policy {
        config.defaults.policy = match p {
            PolicyArg::Adaptive => PolicyKind::Adaptive,
            PolicyArg::Static => PolicyKind::Static,
        };
    }
    if let Some(n) = args.cpu_threads {
        config.cpu_threads = n;
    }
    if let Some(lib) = &args.onnxruntime_lib {
        config.onnxruntime_lib = Some(lib.clone());
    }
    if let Some(p) = args.cpu_precision {
        config.defaults.cpu_precision = match p {
            CpuPrecisionArg::F32 => CpuPrecision::F32,
            CpuPrecisionArg::Bf16 => CpuPrecision::Bf16,
            CpuPrecisionArg::Bf16x3 => CpuPrecision::Bf16x3,
        };
    }
    if let Some(n) = args.max_batch_size {
        config.defaults.max_batch_size = n;
    }
    if let Some(us) = args.max_queue_delay_us {
        config.defaults.max_queue_delay_us = us;
    }
    apply_edge(&args.edge, &mut config)?;
    for (name, path) in &args.models {
        config
            .models
            .entry(name.clone())
            .or_insert_with(ModelOverrides::default)
            .path = Some(path.clone());
    }
    if let Some(repo) = &config.model_repository
        && !repo.is_dir()
    {
        anyhow::bail!(
            "model repository {} is not a directory (run from the project's root for the default, or pass --model-repository DIR or --model NAME=PATH)",
            repo.display()
        );
    }
    config.validate()?;
    Ok(config)
}

/// API keys (the key file read now), CORS, the access log, traces and TLS from the flags.
fn apply_edge(edge: &EdgeArgs, config: &mut Config) -> anyhow::Result<()> {
    for key in &edge.api_keys {
        let key =
            gateway::config::ApiKey::parse(key).map_err(|e| anyhow::anyhow!("--api-key: {e}"))?;
        config.api_keys.push(key);
    }
    config.read_api_keys_file()?;
    if !edge.cors_allow_origins.is_empty() {
        config.cors_allow_origins = edge.cors_allow_origins.clone();
    }
    config.access_log |= edge.access_log;
    if let Some(url) = &edge.otlp_endpoint {
        config.otlp_endpoint = Some(url.clone());
    }
    if let Some(name) = &edge.otlp_service_name {
        config.otlp_service_name = name.clone();
    }
    if let (Some(cert), Some(key)) = (&edge.tls_cert, &edge.tls_key) {
        config.tls = Some(gateway::config::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            // A client CA from the file stays unless the flag names another.
            client_ca: (edge.tls_client_ca.clone())
                .or_else(|| config.tls.as_ref().and_then(|t| t.client_ca.clone())),
        });
    }
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupt received"),
    }
}
