//! OpenTelemetry traces: the OTLP exporter `telemetry:` installs and the
//! [`Span`] every other module makes its spans with. The only module that
//! names `opentelemetry`. While no exporter is installed (the default) a
//! span is an empty value and nothing else happens.
//!
//! Spans travel between modules as W3C `traceparent` strings (the form the
//! task records and the A2A wire already carry), so no other module holds
//! an OpenTelemetry type; [`scope`] makes one the current parent for a
//! future (a task's run, a session's start).

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator, RandomIdGenerator, Sampler,
    SdkTracerProvider, SpanData, SpanExporter,
};

use crate::config::{OtlpProtocol, TelemetryConfig};

/// Why the exporter could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("telemetry.headers_file {path}: {message}")]
    Headers { path: String, message: String },
    #[error("telemetry.otlp_endpoint: {0}")]
    Exporter(String),
}

struct Installed {
    tracer: opentelemetry_sdk::trace::Tracer,
    endpoint: String,
    capture_content: bool,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Flushes what is still buffered when roostd exits.
pub struct Guard(SdkTracerProvider);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Err(error) = self.0.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(%error, "telemetry: spans still buffered at exit were not all sent");
        }
    }
}

/// Installs the exporter `config` names (none when `otlp_endpoint` is
/// unset). Exports run on `runtime`; call once per process.
pub fn install(
    config: &TelemetryConfig,
    runtime: tokio::runtime::Handle,
) -> Result<Option<Guard>, TelemetryError> {
    let Some(endpoint) = config.otlp_endpoint.clone() else {
        return Ok(None);
    };
    let headers = match &config.headers_file {
        Some(path) => read_headers(path)?,
        None => HashMap::new(),
    };
    let exporter = match config.protocol {
        OtlpProtocol::HttpProtobuf => {
            let url = match endpoint.parse::<http::Uri>() {
                Ok(uri) if matches!(uri.path(), "" | "/") => {
                    format!("{}/v1/traces", endpoint.trim_end_matches('/'))
                }
                _ => endpoint.clone(),
            };
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_endpoint(url)
                .with_headers(headers)
                .with_timeout(Duration::from_secs(10))
                .build()
        }
        OtlpProtocol::Grpc => {
            let mut metadata = tonic::metadata::MetadataMap::new();
            for (name, value) in &headers {
                let (Ok(name), Ok(value)) = (
                    name.to_ascii_lowercase()
                        .parse::<tonic::metadata::MetadataKey<_>>(),
                    value.parse(),
                ) else {
                    continue;
                };
                metadata.insert(name, value);
            }
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.clone())
                .with_metadata(metadata)
                .with_timeout(Duration::from_secs(10))
                .build()
        }
    }
    .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    // Room for bursts: at thousands of tasks a second the SDK's defaults
    // (2,048 queued, 512 a batch) drop spans. `OTEL_BSP_*` still win.
    let mut batch = BatchConfigBuilder::default();
    if std::env::var_os("OTEL_BSP_MAX_QUEUE_SIZE").is_none() {
        batch = batch.with_max_queue_size(65_536);
    }
    if std::env::var_os("OTEL_BSP_MAX_EXPORT_BATCH_SIZE").is_none() {
        batch = batch.with_max_export_batch_size(4_096);
    }
    let processor = BatchSpanProcessor::builder(OnRuntime {
        inner: exporter,
        runtime,
    })
    .with_batch_config(batch.build())
    .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            config.sample_ratio,
        ))))
        .with_id_generator(Ids)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(config.service_name.clone())
                .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                .build(),
        )
        .build();
    let installed = Installed {
        tracer: provider.tracer("roostd"),
        endpoint,
        capture_content: config.capture_content,
    };
    if INSTALLED.set(installed).is_err() {
        return Err(TelemetryError::Exporter("installed twice".into()));
    }
    Ok(Some(Guard(provider)))
}

/// `Name: value` lines; `#` comments and blank lines skipped.
pub fn read_headers(path: &Path) -> Result<HashMap<String, String>, TelemetryError> {
    let fail = |message: String| TelemetryError::Headers {
        path: path.display().to_string(),
        message,
    };
    let text = crate::secrets::read_private(path).map_err(fail)?;
    let mut headers = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(fail(format!("line {}: expected 'Name: value'", n + 1)));
        };
        let name = name.trim();
        if http::HeaderName::from_bytes(name.as_bytes()).is_err()
            || http::HeaderValue::from_str(value.trim()).is_err()
        {
            return Err(fail(format!("line {}: not a valid HTTP header", n + 1)));
        }
        headers.insert(name.to_string(), value.trim().to_string());
    }
    Ok(headers)
}

/// Whether spans are made at all.
pub fn enabled() -> bool {
    INSTALLED.get().is_some()
}

/// Whether prompts, answers and tool arguments may go on spans.
pub fn capture_content() -> bool {
    INSTALLED.get().is_some_and(|i| i.capture_content)
}

/// The collector's URL, for `OTEL_EXPORTER_OTLP_ENDPOINT` in a hook's
/// environment.
pub fn endpoint() -> Option<&'static str> {
    INSTALLED.get().map(|i| i.endpoint.as_str())
}

/// What a span is to its trace.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Internal,
    Server,
    Client,
}

/// One span; ended when dropped (or by [`Span::end`]). Empty while
/// telemetry is off.
#[derive(Default)]
pub struct Span(Option<opentelemetry_sdk::trace::Span>);

impl fmt::Debug for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Span").field(&self.traceparent()).finish()
    }
}

/// A value a span attribute takes.
pub enum Value {
    Str(String),
    Int(i64),
    Bool(bool),
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(v)
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

fn key_value(key: &'static str, value: Value) -> KeyValue {
    match value {
        Value::Str(s) => KeyValue::new(key, s),
        Value::Int(i) => KeyValue::new(key, i),
        Value::Bool(b) => KeyValue::new(key, b),
    }
}

tokio::task_local! {
    static CURRENT: Option<String>;
}

thread_local! {
    /// The trace id the next root span takes (see [`Span::root_in`]).
    static NEXT_TRACE: Cell<Option<TraceId>> = const { Cell::new(None) };
}

/// Random ids, except a root span that asks for a given trace id.
#[derive(Debug)]
struct Ids;

impl IdGenerator for Ids {
    fn new_trace_id(&self) -> TraceId {
        NEXT_TRACE
            .with(Cell::take)
            .unwrap_or_else(|| RandomIdGenerator::default().new_trace_id())
    }
    fn new_span_id(&self) -> SpanId {
        RandomIdGenerator::default().new_span_id()
    }
}

/// Runs `fut` with `traceparent` as the parent of the spans it makes
/// without naming one ([`current`]).
pub async fn scope<F: Future>(traceparent: Option<String>, fut: F) -> F::Output {
    if traceparent.is_none() && !enabled() {
        return fut.await;
    }
    CURRENT.scope(traceparent, fut).await
}

/// The parent [`scope`] set for this task, if any.
pub fn current() -> Option<String> {
    CURRENT.try_with(Clone::clone).ok().flatten()
}

/// The remote parent a `traceparent` names (version 00).
fn parent_context(traceparent: &str) -> Option<Context> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00" || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    if trace == TraceId::INVALID || span == SpanId::INVALID {
        return None;
    }
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
    let context = SpanContext::new(trace, span, flags, true, TraceState::default());
    Some(Context::new().with_remote_span_context(context))
}

impl Span {
    /// A span under `parent` (a `traceparent`; none: the [`current`] one,
    /// else a new trace).
    pub fn start(name: impl Into<String>, kind: Kind, parent: Option<&str>) -> Self {
        let Some(installed) = INSTALLED.get() else {
            return Self(None);
        };
        let parent = parent.map(str::to_string).or_else(current);
        Self::build(installed, name.into(), kind, parent.as_deref(), None)
    }

    fn build(
        installed: &Installed,
        name: String,
        kind: Kind,
        parent: Option<&str>,
        at: Option<std::time::SystemTime>,
    ) -> Self {
        let cx = parent.and_then(parent_context).unwrap_or_default();
        let kind = match kind {
            Kind::Internal => SpanKind::Internal,
            Kind::Server => SpanKind::Server,
            Kind::Client => SpanKind::Client,
        };
        let mut builder = installed.tracer.span_builder(name).with_kind(kind);
        if let Some(at) = at {
            builder = builder.with_start_time(at);
        }
        Self(Some(installed.tracer.build_with_context(builder, &cx)))
    }

    /// [`Self::start`], begun at `at` (a step measured before its span
    /// could be made).
    pub fn start_at(
        name: impl Into<String>,
        kind: Kind,
        parent: Option<&str>,
        at: std::time::SystemTime,
    ) -> Self {
        let Some(installed) = INSTALLED.get() else {
            return Self(None);
        };
        Self::build(installed, name.into(), kind, parent, Some(at))
    }

    /// A span under `parent`, or, without one, the root of the trace whose
    /// id is `trace_id` (32 hex digits: the id roostd already reports for
    /// the task or session, so the two agree).
    pub fn root_in(
        name: impl Into<String>,
        kind: Kind,
        parent: Option<&str>,
        trace_id: &str,
    ) -> Self {
        if !enabled() {
            return Self(None);
        }
        if parent.and_then(parent_context).is_some() {
            return Self::start(name, kind, parent);
        }
        NEXT_TRACE.with(|next| next.set(TraceId::from_hex(trace_id).ok()));
        let span = CURRENT.sync_scope(None, || Self::start(name, kind, None));
        NEXT_TRACE.with(Cell::take);
        span
    }

    pub fn is_recording(&self) -> bool {
        self.0.as_ref().is_some_and(|s| s.is_recording())
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        if let Some(span) = self.0.as_mut().filter(|s| s.is_recording()) {
            span.set_attribute(key_value(key, value.into()));
        }
    }

    /// Marks the span failed, with `message` (no content: a reason).
    pub fn fail(&mut self, message: impl Into<String>) {
        if let Some(span) = self.0.as_mut().filter(|s| s.is_recording()) {
            let message = message.into();
            span.set_attribute(KeyValue::new("error.type", first_word(&message)));
            span.set_status(Status::error(message));
        }
    }

    /// This span as the parent of others: a W3C `traceparent`.
    pub fn traceparent(&self) -> Option<String> {
        let span = self.0.as_ref()?;
        let c = span.span_context();
        Some(format!(
            "00-{}-{}-{:02x}",
            c.trace_id(),
            c.span_id(),
            c.trace_flags().to_u8()
        ))
    }

    pub fn end(self) {}
}

/// `error.type` wants a low-cardinality class, not the message.
fn first_word(message: &str) -> String {
    message
        .split(|c: char| c == ':' || c.is_whitespace())
        .find(|w| !w.is_empty())
        .unwrap_or("error")
        .chars()
        .take(40)
        .collect()
}

/// The OTLP exporters need a tokio reactor; the SDK's batch processor
/// exports from its own thread, so each export runs on roostd's runtime.
#[derive(Debug)]
struct OnRuntime<E> {
    inner: E,
    runtime: tokio::runtime::Handle,
}

impl<E: SpanExporter> SpanExporter for OnRuntime<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.runtime.block_on(self.inner.export(batch));
        if let Err(error) = &result {
            tracing::warn!(%error, spans, "telemetry: spans not exported");
        }
        result
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _entered = self.runtime.enter();
        self.inner.shutdown_with_timeout(timeout)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }
    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_names_a_remote_parent_or_nothing() {
        let cx = parent_context("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
            .expect("valid");
        let span = cx.span();
        let c = span.span_context();
        assert_eq!(c.trace_id().to_string(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(c.span_id().to_string(), "b7ad6b7169203331");
        assert!(c.is_sampled() && c.is_remote());
        for bad in [
            "",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-xyz-b7ad6b7169203331-01",
        ] {
            assert!(parent_context(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn off_spans_cost_nothing_and_carry_nothing() {
        let mut span = Span::start(
            "x",
            Kind::Internal,
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        );
        span.set("k", "v");
        assert!(span.traceparent().is_none());
        assert!(!span.is_recording());
    }

    #[test]
    fn a_headers_file_is_private_and_names_valid_headers() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("otlp.headers");
        let write = |text: &str, mode: u32| {
            std::fs::write(&path, text).expect("write");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        };
        write(
            "# vendor key\nx-honeycomb-team: abc123\n\nAuthorization: Bearer t0k\n",
            0o600,
        );
        let headers = read_headers(&path).expect("read");
        assert_eq!(headers["x-honeycomb-team"], "abc123");
        assert_eq!(headers["Authorization"], "Bearer t0k");
        write("x-key: v\n", 0o644);
        let error = read_headers(&path).expect_err("world-readable").to_string();
        assert!(error.contains("chmod 600"), "{error}");
        write("no colon here\n", 0o600);
        let error = read_headers(&path).expect_err("malformed").to_string();
        assert!(
            error.contains("line 1") && error.contains("Name: value"),
            "{error}"
        );
        write("bad name: v\n", 0o600);
        assert!(read_headers(&path).is_err());
    }

    #[test]
    fn error_types_are_a_class() {
        assert_eq!(first_word("timeout: the model did not answer"), "timeout");
        assert_eq!(first_word(""), "error");
    }
}
