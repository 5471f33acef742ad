//! An OTLP trace receiver for the telemetry tests: what roostd exports,
//! over HTTP/protobuf (`POST /v1/traces`) or gRPC, decoded with the
//! OpenTelemetry protocol's own generated types (`opentelemetry-proto`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;

/// One received span, flattened.
#[derive(Debug, Clone)]
pub struct Got {
    pub service: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent: String,
    pub name: String,
    pub kind: i32,
    /// Attribute values as text (ints and bools formatted).
    pub attrs: HashMap<String, String>,
    /// Status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
}

#[derive(Clone, Default)]
pub struct Receiver {
    spans: Arc<Mutex<Vec<Got>>>,
    pub port: u16,
}

fn text(value: Option<&Any>) -> String {
    match value {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

impl Receiver {
    fn take(&self, request: ExportTraceServiceRequest) {
        let mut spans = self.spans.lock().expect("lock");
        for resource in request.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .map(|kv| text(kv.value.as_ref().and_then(|v| v.value.as_ref())))
                .unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    spans.push(Got {
                        service: service.clone(),
                        trace_id: hex::encode(&span.trace_id),
                        span_id: hex::encode(&span.span_id),
                        parent: hex::encode(&span.parent_span_id),
                        name: span.name,
                        kind: span.kind,
                        attrs: span
                            .attributes
                            .iter()
                            .map(|kv| {
                                let v = kv.value.as_ref().and_then(|v| v.value.as_ref());
                                (kv.key.clone(), text(v))
                            })
                            .collect(),
                        status: span.status.map_or(0, |s| s.code),
                    });
                }
            }
        }
    }

    pub fn spans(&self) -> Vec<Got> {
        self.spans.lock().expect("lock").clone()
    }

    async fn bind() -> (Self, tokio::net::TcpListener) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let receiver = Self {
            port: listener.local_addr().expect("addr").port(),
            ..Self::default()
        };
        (receiver, listener)
    }

    /// Receives `POST /v1/traces` (protobuf bodies) on a free loopback port.
    pub async fn http() -> Self {
        let (receiver, listener) = Self::bind().await;
        let app = Router::new()
            .route("/v1/traces", post(export_http))
            .with_state(receiver.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        receiver
    }

    /// Receives the gRPC `TraceService/Export` on a free loopback port.
    pub async fn grpc() -> Self {
        let (receiver, listener) = Self::bind().await;
        let app = tonic::service::Routes::new(TraceServiceServer::new(receiver.clone()))
            .prepare()
            .into_axum_router();
        tokio::spawn(async move { axum::serve(listener, app).await });
        receiver
    }
}

async fn export_http(State(receiver): State<Receiver>, body: Bytes) -> (StatusCode, Vec<u8>) {
    match ExportTraceServiceRequest::decode(body) {
        Ok(request) => {
            receiver.take(request);
            (
                StatusCode::OK,
                ExportTraceServiceResponse::default().encode_to_vec(),
            )
        }
        Err(_) => (StatusCode::BAD_REQUEST, Vec::new()),
    }
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.take(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}
