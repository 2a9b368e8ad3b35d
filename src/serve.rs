//! `tandem serve`: assembles the configuration from file, flags and environment, binds the
//! listener, and runs the gateway until SIGTERM or ctrl-c.

use std::path::Path;

use anyhow::Context;
use gateway::Config;
use gateway::config::{DEFAULT_CONFIG, ModelOverrides};
use tokio::sync::watch;

use crate::cli::ServeArgs;

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = build_config(&args)?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.http_threads {
        runtime.worker_threads(n.max(1));
    }
    let runtime = runtime.enable_all().thread_name("tandem-http").build()?;
    runtime.block_on(async move {
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
        gateway::run(config, listener, rx).await?;
        Ok(())
    })
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
    if let Some(m) = args.metrics_listen {
        config.metrics_listen = Some(m);
    }
    if let Some(n) = args.max_batch_size {
        config.defaults.max_batch_size = n;
    }
    if let Some(us) = args.max_queue_delay_us {
        config.defaults.max_queue_delay_us = us;
    }
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
