//! A request's trace: its spans made once it is answered, from the phases the core noted
//! ([`crate::infer::phases`]) — `request` (continuing a
//! W3C `traceparent`), and under it `admission` (reading, parsing, admitting), `queue`
//! (waiting for a batch), `batch` (the batch until this request's answer is back, with
//! `forward` inside it) and `write` (encoding the answer).

use std::time::{Instant, SystemTime};

use http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;

use crate::infer::phases::Phases;
use crate::otlp::Traces;

/// The context a `traceparent` header continues; a root if there is none, or it does not
/// parse (then with a warning, at most one a second).
pub fn parent(headers: &HeaderMap) -> Context {
    let Some(given) = headers.get("traceparent") else {
        return Context::new();
    };
    let extracted =
        TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers));
    if !extracted.span().span_context().is_valid() {
        warn_malformed(given);
    }
    extracted
}

fn warn_malformed(given: &http::HeaderValue) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let second = SystemTime::UNIX_EPOCH.elapsed().map_or(0, |d| d.as_secs());
    if LAST.swap(second, Ordering::Relaxed) != second {
        let shown = String::from_utf8_lossy(&given.as_bytes()[..given.len().min(80)]).into_owned();
        tracing::warn!(traceparent = %shown, "ignoring a malformed traceparent: the request starts a new trace");
    }
}

/// What the request span says of the request besides its phases.
pub struct Finished<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub request_id: &'a str,
    pub status: u16,
    pub began: Instant,
}

/// Makes the request's spans, now that it is answered.
pub fn export(traces: &Traces, parent: &Context, request: Finished<'_>, phases: Phases) {
    let (now, wall) = (Instant::now(), SystemTime::now());
    let at = |t: Instant| wall - now.saturating_duration_since(t);
    let start = phases
        .queued
        .map_or(request.began, |(arrival, _)| arrival.min(request.began));
    let mut attributes = vec![
        KeyValue::new("http.request.method", request.method.to_string()),
        KeyValue::new("url.path", request.path.to_string()),
        KeyValue::new("http.response.status_code", i64::from(request.status)),
        KeyValue::new("tandem.request_id", request.request_id.to_string()),
    ];
    if let Some(model) = phases.model {
        attributes.push(KeyValue::new("tandem.model", model));
    }
    let tracer = &traces.tracer;
    let span = tracer
        .span_builder("request")
        .with_kind(SpanKind::Server)
        .with_start_time(at(start))
        .with_attributes(attributes)
        .start_with_context(tracer, parent);
    let cx = parent.with_span(span);
    let child = |name: &'static str, from: Instant, to: Instant, cx: &Context| {
        let span = tracer
            .span_builder(name)
            .with_start_time(at(from))
            .start_with_context(tracer, cx);
        let cx = cx.with_span(span);
        cx.span().end_with_timestamp(at(to.max(from)));
        cx
    };
    if let Some((arrival, queued)) = phases.queued {
        child("admission", start, queued, &cx);
        if let Some((back, queue_time, compute_time)) = phases.answered {
            let batch_start = (arrival + queue_time).max(queued);
            child("queue", queued, batch_start, &cx);
            let batch = child("batch", batch_start, back, &cx);
            child("forward", batch_start, batch_start + compute_time, &batch);
            child("write", back, now, &cx);
        }
    }
    cx.span().end_with_timestamp(wall);
}
