//! Logs and traces: the process's `tracing` subscriber, and OpenTelemetry export over OTLP.
//!
//! Logs go to stderr as before (`DECIDE_LOG` filters them). With `--otlp-endpoint` the same
//! subscriber also turns decide's spans into OpenTelemetry spans (`tracing-opentelemetry`) and
//! a batch processor on its own thread exports them over OTLP/HTTP (protobuf) to a collector.
//! Without it no OpenTelemetry layer exists: the spans are `debug` level, which the default
//! log filter leaves disabled, so they cost a disabled-callsite check each.
//!
//! The span tree of a request (every span's target starts with `decide`; nothing else is
//! exported: no log events, so no message can carry an input text out):
//!
//! ```text
//! request  (POST /v1/decisions: tenant, request id, status; parent: the caller's traceparent)
//!   compile          question-type plugins compile the questions, readouts are planned
//!   render_tokenize  renderer plugin, chat template and tokenizer for each prompt of a round
//!   queue_wait       the read job waits for the model worker
//!   model_pass       the worker's batched passes over this job (batch size, tokens)
//!   answer           calibration and question-type answers
//! ```
//!
//! The model worker serves several requests in one batch: each job carries its request's span,
//! and the worker opens one `model_pass` span under each request it served, with the batch's
//! size and tokens and the request's own. A W3C `traceparent` header on the request makes its
//! span a child of the caller's (the global propagator is W3C trace context).
//!
//! Counts are recorded as `i64`: `tracing-opentelemetry` exports unsigned fields as text.

use std::time::Duration;

use anyhow::Context;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// How often the batch processor sends what it holds, unless `OTEL_BSP_SCHEDULE_DELAY` says
/// otherwise (the SDK's own default is 5 s; a trace then shows up within a second or so).
const EXPORT_EVERY: Duration = Duration::from_secs(1);

/// Seconds one export may take before it is given up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Field names of the request span, recorded once known.
pub const REQUEST_ID: &str = "decide.request_id";
pub const TENANT: &str = "decide.tenant";

/// The installed exporter, if any; [`Telemetry::shutdown`] flushes what it holds.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans not exported yet and stops the exporter (at exit).
    pub fn shutdown(self) {
        if let Some(provider) = self.provider {
            if let Err(error) = provider.shutdown() {
                eprintln!("decide: the OTLP exporter did not flush: {error}");
            }
        }
    }
}

/// Installs the process's subscriber: logs on stderr filtered by `DECIDE_LOG`, and with
/// `otlp_endpoint` decide's spans exported to that collector.
pub fn init(otlp_endpoint: Option<&str>) -> anyhow::Result<Telemetry> {
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_env("DECIDE_LOG")
                .unwrap_or_else(|_| "info,wasmtime=warn,cranelift=warn".into()),
        );
    let provider = otlp_endpoint.map(tracer_provider).transpose()?;
    let spans = provider.as_ref().map(|provider| {
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("decide"))
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.is_span() && meta.target().starts_with("decide")
            }))
    });
    tracing_subscriber::registry().with(logs).with(spans).init();
    if let Some(endpoint) = otlp_endpoint {
        tracing::info!(
            endpoint = %traces_url(endpoint),
            "exporting traces over OTLP/HTTP"
        );
    }
    Ok(Telemetry { provider })
}

/// The SDK's provider with a batch exporter to `endpoint` (service name `decide`).
fn tracer_provider(endpoint: &str) -> anyhow::Result<SdkTracerProvider> {
    let url = traces_url(endpoint);
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .with_context(|| format!("the OTLP exporter for {url} (setting --otlp-endpoint)"))?;
    let mut batch = BatchConfigBuilder::default();
    if std::env::var_os("OTEL_BSP_SCHEDULE_DELAY").is_none() {
        batch = batch.with_scheduled_delay(EXPORT_EVERY);
    }
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batch.build())
        .build();
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("decide")
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build())
}

/// The collector's traces URL: `endpoint` with `/v1/traces` appended unless it has a path.
pub fn traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    let after_scheme = trimmed.split_once("://").map_or(trimmed, |(_, rest)| rest);
    if after_scheme.contains('/') {
        trimmed.to_string()
    } else {
        format!("{trimmed}/v1/traces")
    }
}

/// Middleware: one span per request (probes of `/health` and `/metrics` get none), a child
/// of the caller's `traceparent` when it sends one, with the method, path and status.
pub async fn trace_requests(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path == "/health" || path == "/metrics" {
        return next.run(request).await;
    }
    let method = request.method().as_str();
    let span = tracing::debug_span!(
        target: "decide::request",
        "request",
        otel.name = %format!("{method} {path}"),
        otel.kind = "server",
        http.request.method = %method,
        url.path = %path,
        http.response.status_code = tracing::field::Empty,
        decide.request_id = tracing::field::Empty,
        decide.tenant = tracing::field::Empty,
    );
    if span.is_disabled() {
        return next.run(request).await;
    }
    let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&opentelemetry_http::HeaderExtractor(request.headers()))
    });
    // Without a remote parent the span starts a trace of its own.
    let _ = span.set_parent(parent);
    let response = tracing::Instrument::instrument(next.run(request), span.clone()).await;
    span.record(
        "http.response.status_code",
        i64::from(response.status().as_u16()),
    );
    response
}

/// Records a field of the request span (the current span in a request's handler and on its
/// pipeline thread); a no-op outside a request or with tracing off.
pub fn record(field: &'static str, value: &str) {
    tracing::Span::current().record(field, value);
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn the_traces_path_is_added_only_to_a_bare_endpoint() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/custom/v1/traces"),
            "http://collector:4318/custom/v1/traces"
        );
    }
}
