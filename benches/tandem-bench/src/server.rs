//! The server under load, as the load generator sees it outside the measured requests:
//! its model's input width (and, if asked, an emptied response cache) before the run, and
//! its `/metrics` once a second during it (batch sizes, device busy share, context
//! switches). These few requests go through
//! hyper's client; the measured ones through `http1`, which costs the shared cores less.

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::time::Instant;

type HyperSender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: std::net::SocketAddr) -> Option<HyperSender> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(conn);
    Some(sender)
}

pub async fn get(
    addr: std::net::SocketAddr,
    authority: &str,
    path: &str,
) -> anyhow::Result<(http::StatusCode, Bytes)> {
    send(http::Method::GET, addr, authority, path).await
}

/// A bodiless request and its whole answer.
async fn send(
    method: http::Method,
    addr: std::net::SocketAddr,
    authority: &str,
    path: &str,
) -> anyhow::Result<(http::StatusCode, Bytes)> {
    let mut s = connect(addr)
        .await
        .with_context(|| format!("cannot reach {authority}"))?;
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, authority)
        .body(Full::new(Bytes::new()))?;
    let resp = s.send_request(req).await?;
    let status = resp.status();
    Ok((status, resp.into_body().collect().await?.to_bytes()))
}

/// Empties `model`'s answers from tandem's response cache (for a model that does not use
/// it, there is nothing to empty, and the server says so with a 200 too).
pub async fn clear_cache(
    addr: std::net::SocketAddr,
    authority: &str,
    model: &str,
) -> anyhow::Result<()> {
    let path = format!("/admin/models/{model}/cache");
    let (status, body) = send(http::Method::DELETE, addr, authority, &path).await?;
    anyhow::ensure!(
        status.is_success(),
        "--clear-cache: DELETE {path}: {status} {}",
        String::from_utf8_lossy(&body)
    );
    Ok(())
}

pub async fn row_shape(
    addr: std::net::SocketAddr,
    authority: &str,
    model: &str,
) -> anyhow::Result<super::load::requests::RowShape> {
    let (status, body) = get(addr, authority, &format!("/v2/models/{model}")).await?;
    anyhow::ensure!(
        status.is_success(),
        "model metadata: {status} {}",
        String::from_utf8_lossy(&body)
    );
    let meta: serde_json::Value = serde_json::from_slice(&body)?;
    let input = &meta["inputs"][0];
    anyhow::ensure!(
        input["datatype"] == "FP32",
        "bench load sends FP32 rows; the model's first input is {}",
        input["datatype"]
    );
    let dims = input["shape"]
        .as_array()
        .and_then(|s| s.get(1..))
        .context("model metadata has no input shape")?
        .iter()
        .map(|d| d.as_u64().map(|d| d as usize))
        .collect::<Option<Vec<_>>>()
        .context("bench load needs fixed dims past the batch dimension")?;
    let name = |t: &serde_json::Value| t["name"].as_str().map(str::to_string);
    Ok(super::load::requests::RowShape {
        input: name(input).context("model metadata: an input without a name")?,
        output: name(&meta["outputs"][0]).context("model metadata: no output")?,
        dims,
    })
}

/// What the server's /metrics said during a run.
#[derive(Debug, Default)]
pub struct ServerSide {
    /// Mean rows per batch in each second (`None` for a second without batches or a
    /// server without `tandem_batch_rows`).
    pub batch_rows: Vec<Option<f64>>,
    /// Context switches of the server process from the first scrape to the last.
    pub context_switches: Option<f64>,
    /// `tandem_device_busy_ratio` at each second's scrape.
    pub device_busy: Vec<f64>,
}

/// Scrapes the server's /metrics at the start and once a second.
pub async fn scrape_server(
    addr: std::net::SocketAddr,
    authority: String,
    model: String,
    start: Instant,
    duration: f64,
) -> ServerSide {
    let read = || async {
        let (_, body) = get(addr, &authority, "/metrics").await.ok()?;
        Some(String::from_utf8_lossy(&body).into_owned())
    };
    let value = |text: &str, name: &str, label: Option<&str>| {
        text.lines()
            .find(|l| l.starts_with(name) && label.is_none_or(|label| l.contains(label)))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    let label = format!("model=\"{model}\"");
    let batches = |text: &Option<String>| {
        let text = text.as_deref()?;
        Some((
            value(text, "tandem_batch_rows_sum{", Some(&label))?,
            value(text, "tandem_batch_rows_count{", Some(&label))?,
        ))
    };
    let switches = |text: &Option<String>| {
        value(
            text.as_deref()?,
            "tandem_process_context_switches_total ",
            None,
        )
    };
    let first = read().await;
    let mut side = ServerSide::default();
    let mut last = first.clone();
    for second in 1..=duration.ceil() as u32 {
        tokio::time::sleep_until(start + Duration::from_secs(second as u64)).await;
        let now = read().await;
        side.batch_rows.push(match (batches(&last), batches(&now)) {
            (Some((rows0, n0)), Some((rows1, n1))) if n1 > n0 => Some((rows1 - rows0) / (n1 - n0)),
            _ => None,
        });
        if let Some(busy) = now
            .as_deref()
            .and_then(|t| value(t, "tandem_device_busy_ratio{", None))
        {
            side.device_busy.push(busy);
        }
        last = now;
    }
    side.context_switches = match (switches(&first), switches(&last)) {
        (Some(a), Some(b)) if b >= a => Some(b - a),
        _ => None,
    };
    side
}
