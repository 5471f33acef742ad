//! The A2A gRPC binding (1.0: `lf.a2a.v1.A2AService`, generated from the
//! specification's `proto/a2a.proto`), on the gateway's port: a request's
//! message, as ProtoJSON, is what the other bindings' operations read
//! (`rpc::run`), and their answers go back as the method's message. The
//! route is the request's `tenant` (or `a2a.grpc.default_route`); tokens
//! are checked per route; errors carry the spec's status codes and a
//! `google.rpc.ErrorInfo`. A call for a route another node of a cluster
//! runs goes there as the JSON-RPC request it is (`handoff::jsonrpc`).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tonic::metadata::MetadataMap;
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::envelope::Op;
use super::error::A2aError;
use super::handoff::{self, Handed, Refused};
use super::routing::Route;
use super::rpc::{self, Answer};
use super::streams::Slot;
use super::wire::Dialect;
use super::{Gateway, MAX_BODY_BYTES};

/// The messages and service generated from `proto/a2a.proto` (`build.rs`).
#[allow(
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    missing_docs,
    unreachable_pub
)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/lf.a2a.v1.rs"));
    include!(concat!(env!("OUT_DIR"), "/lf.a2a.v1.serde.rs"));
}

/// A2A 0.3's messages and service (`a2a.v1`, from `proto/v03/a2a.proto`).
#[allow(
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    missing_docs,
    unreachable_pub
)]
pub mod pb03 {
    include!(concat!(env!("OUT_DIR"), "/a2a.v1.rs"));
    include!(concat!(env!("OUT_DIR"), "/a2a.v1.serde.rs"));
}

use pb::a2a_service_server::{A2aService, A2aServiceServer};

/// Where the service is routed on the gateway.
pub const PATH: &str = "/lf.a2a.v1.A2AService/{*rest}";
/// What every gRPC request's path starts with.
pub const PREFIX: &str = "/lf.a2a.v1.A2AService/";

/// The service, on the gateway's state.
#[derive(Clone)]
pub(super) struct Grpc {
    gw: Gateway,
    /// The route of a request that names no tenant.
    default_route: Option<Arc<str>>,
    /// 0.3's service (`a2a.v1`): requests read into 1.0's and answers
    /// written back ([`super::v03_proto`]); the route is the default one
    /// (0.3 has no tenant).
    v03: bool,
}

/// The service to route at [`PATH`], its messages no larger than the other
/// bindings' bodies.
pub(super) fn service(gw: &Gateway, default_route: Option<&str>) -> A2aServiceServer<Grpc> {
    A2aServiceServer::new(Grpc {
        gw: gw.clone(),
        default_route: default_route.map(Arc::from),
        v03: false,
    })
    .max_decoding_message_size(MAX_BODY_BYTES)
}

impl Grpc {
    /// 0.3's service state (`grpc_v03.rs` serves it).
    pub(super) fn v03(gw: &Gateway, default_route: Option<&str>) -> Self {
        Self {
            gw: gw.clone(),
            default_route: default_route.map(Arc::from),
            v03: true,
        }
    }
}

pub(super) type Events<E = pb::StreamResponse> =
    Pin<Box<dyn Stream<Item = Result<E, Status>> + Send>>;

/// An A2A error as gRPC says it (the specification's table, 5.4), with
/// `ErrorInfo` for the A2A-specific ones.
pub(super) fn status(e: &A2aError) -> Status {
    let code = match e {
        A2aError::TaskNotFound(_) => Code::NotFound,
        A2aError::MethodNotFound(_) => Code::Unimplemented,
        A2aError::NotCancelable(_) | A2aError::ExtendedCardNotConfigured => {
            Code::FailedPrecondition
        }
        A2aError::PushNotSupported | A2aError::Unsupported(_) | A2aError::Version(_) => {
            Code::Unimplemented
        }
        A2aError::Parse(_)
        | A2aError::InvalidRequest(_)
        | A2aError::InvalidParams(_)
        | A2aError::ContentType(_) => Code::InvalidArgument,
        A2aError::Internal(_) => Code::Internal,
    };
    match e.reason() {
        Some(reason) => Status::with_error_details(
            code,
            e.message(),
            ErrorDetails::with_error_info(reason, "a2a-protocol.org", HashMap::new()),
        ),
        None => Status::new(code, e.message()),
    }
}

/// Logs each refused gRPC call, whoever refused it: the service's
/// handlers, or tonic before them (a malformed frame, an oversized
/// message, an unknown method), which answer trailers-only.
pub(super) async fn log_refusals(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    // Named only when it is refused (the URI's clone shares its bytes).
    let uri = request.uri().clone();
    let response = next.run(request).await;
    if let Some(refused) = Status::from_header_map(response.headers())
        && refused.code() != Code::Ok
    {
        let path = uri.path();
        let method = path
            .strip_prefix(PREFIX)
            .or_else(|| path.strip_prefix("/a2a.v1.A2AService/"))
            .unwrap_or_default();
        let (code, message) = (refused.code(), refused.message());
        tracing::info!(binding = "grpc", %method, ?code, message, "A2A request refused");
    }
    response
}

/// What a call ran into: an answer here (with the stream slot it holds),
/// or one from the node that runs its route.
enum Ran {
    Here(Answer, Option<Slot>),
    Handed(Handed),
}

/// A handed-over call's refusal, as gRPC says it.
fn refused(e: &Refused) -> Status {
    match e {
        Refused::A2a(e) => status(e),
        Refused::Http(401, m) => Status::unauthenticated(m.clone()),
        Refused::Http(404, m) => Status::not_found(m.clone()),
        Refused::Http(_, m) => Status::internal(m.clone()),
        Refused::Node(e) => Status::unavailable(e.to_string()),
    }
}

fn from_json<R: DeserializeOwned>(v: Value) -> Result<R, Status> {
    serde_json::from_value(v).map_err(|e| {
        tracing::error!(error = %e, "an A2A answer does not fit its gRPC message");
        Status::internal("the answer could not be encoded; see roostd's log")
    })
}

impl Grpc {
    /// The route a request is for, once its token opens it. The tenant is
    /// checked as the other bindings check a path's route, and the token
    /// before anything is said about the route (an unknown route and a
    /// known one answer alike to a caller without a token).
    async fn route(&self, meta: &MetadataMap, tenant: &str) -> Result<(Route, String), Status> {
        let name = match (tenant, &self.default_route) {
            ("", Some(default)) => default.to_string(),
            ("", None) if self.v03 => {
                return Err(Status::failed_precondition(
                    "A2A 0.3's gRPC names no agent: it serves the route `a2a.grpc.default_route` \
                     names, and none is set (or call 1.0's lf.a2a.v1.A2AService with a tenant)",
                ));
            }
            ("", None) => {
                return Err(Status::invalid_argument(
                    "set the request's tenant to the agent's route (the tenant of the GRPC \
                     interface in its agent card)",
                ));
            }
            (tenant, _) => super::access::route_name(tenant).map_err(|m| {
                tracing::warn!("A2A gRPC request naming no valid route refused");
                Status::invalid_argument(m)
            })?,
        };
        let rules = self.gw.access.snapshot();
        let found = super::route_of(&self.gw, &name).await;
        let key = found.as_ref().map_or(name.as_str(), |r| r.name.as_str());
        let given = meta
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let Some(owner) = rules.caller(key, given) else {
            tracing::warn!(route = %key, "A2A gRPC request without a valid bearer token");
            return Err(Status::unauthenticated(
                "send `authorization: Bearer <token>` metadata with this agent's token (its \
                 card's securitySchemes)",
            ));
        };
        let route = found.ok_or_else(|| {
            Status::not_found(format!(
                "no agent at route '{name}': no session has had this name"
            ))
        })?;
        Ok((route, owner))
    }

    /// Runs the operation the request asks for, as the other bindings do.
    async fn run<Q: Serialize>(&self, op: Op, request: Request<Q>) -> Result<Ran, Status> {
        let (meta, _, message) = request.into_parts();
        let speaks = if self.v03 { Dialect::V03 } else { Dialect::V10 };
        if let Some(v) = meta.get("a2a-version").and_then(|v| v.to_str().ok())
            && Dialect::from_header(Some(v)).ok() != Some(speaks)
        {
            let (service, version) = if self.v03 {
                ("a2a.v1.A2AService", "0.3")
            } else {
                ("lf.a2a.v1.A2AService", "1.0")
            };
            return Err(status(&A2aError::Version(format!(
                "A2A-Version '{v}' is not served by {service}; it speaks {version}"
            ))));
        }
        let mut params = serde_json::to_value(&message)
            .map_err(|e| Status::internal(format!("cannot read the request: {e}")))?;
        if self.v03 {
            params = super::v03_proto::grpc_request_in(op, params);
        }
        let tenant = params
            .get("tenant")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let (route, owner) = self.route(&meta, &tenant).await?;
        let headers = meta.into_headers();
        if let (Some(node), Some(handoff)) = (&route.node, &self.gw.handoff) {
            // Another node runs the route: the call goes there as JSON-RPC.
            return handoff::jsonrpc(&**handoff, node, &route.name, (op, &params), &headers)
                .await
                .map(Ran::Handed)
                .map_err(|e| refused(&e));
        }
        let slot = rpc::stream_slot(&self.gw, &route, op).map_err(|e| status(&e))?;
        let at = super::At {
            route: &route,
            owner: &owner,
        };
        let d = if self.v03 && op == Op::ExtendedCard {
            Dialect::V03
        } else {
            Dialect::V10
        };
        rpc::run(&self.gw, at, d, op, &params, &headers)
            .await
            .map(|answer| Ran::Here(answer, slot))
            .map_err(|e| status(&e))
    }

    /// Runs an operation whose answer says nothing (a delete).
    pub(super) async fn done<Q: Serialize>(
        &self,
        op: Op,
        request: Request<Q>,
    ) -> Result<(), Status> {
        self.run(op, request).await.map(drop)
    }

    /// An answer as this service's version says it.
    fn out(&self, op: Op, v: Value) -> Value {
        if self.v03 {
            super::v03_proto::answer_out(op, v)
        } else {
            v
        }
    }

    pub(super) async fn unary<Q: Serialize, R: DeserializeOwned>(
        &self,
        op: Op,
        request: Request<Q>,
    ) -> Result<Response<R>, Status> {
        match self.run(op, request).await? {
            Ran::Here(Answer::Value(v), _) | Ran::Handed(Handed::Value(v)) => {
                from_json(self.out(op, v)).map(Response::new)
            }
            Ran::Here(Answer::Stream(..), _) | Ran::Handed(Handed::Events(_)) => Err(
                Status::internal("the operation answered with a stream where a message belongs"),
            ),
        }
    }

    pub(super) async fn stream<Q: Serialize, E: DeserializeOwned + Send + 'static>(
        &self,
        op: Op,
        request: Request<Q>,
    ) -> Result<Response<Events<E>>, Status> {
        let frame: fn(Value) -> Value = if self.v03 {
            super::v03_proto::event_out
        } else {
            |v| v
        };
        let events: Events<E> = match self.run(op, request).await? {
            Ran::Handed(Handed::Value(v)) => {
                Box::pin(futures::stream::once(async move { from_json(frame(v)) }))
            }
            Ran::Handed(Handed::Events(events)) => Box::pin(events.map(move |event| match event {
                Ok(v) => from_json::<E>(frame(v)),
                Err(e) => Err(refused(&e)),
            })),
            Ran::Here(Answer::Stream(task, after, through_input), Some(slot)) => Box::pin(
                super::task_events(
                    Arc::clone(&self.gw.tasks),
                    *task,
                    after,
                    through_input,
                    (Dialect::V10, slot),
                )
                // Keep-alives are HTTP/2's business here.
                .filter_map(futures::future::ready)
                .map(move |v| from_json::<E>(frame(v))),
            ),
            Ran::Here(Answer::Stream(..), None) => {
                return Err(Status::internal("a stream without a slot"));
            }
            Ran::Here(Answer::Value(v), _) => {
                let v = self.out(op, v);
                Box::pin(futures::stream::once(async move { from_json(v) }))
            }
        };
        Ok(Response::new(events))
    }
}

#[tonic::async_trait]
impl A2aService for Grpc {
    async fn send_message(
        &self,
        r: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, Status> {
        self.unary(Op::Send, r).await
    }

    type SendStreamingMessageStream = Events;

    async fn send_streaming_message(
        &self,
        r: Request<pb::SendMessageRequest>,
    ) -> Result<Response<Events>, Status> {
        self.stream(Op::Stream, r).await
    }

    async fn get_task(&self, r: Request<pb::GetTaskRequest>) -> Result<Response<pb::Task>, Status> {
        self.unary(Op::Get, r).await
    }

    async fn list_tasks(
        &self,
        r: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        self.unary(Op::List, r).await
    }

    async fn cancel_task(
        &self,
        r: Request<pb::CancelTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        self.unary(Op::Cancel, r).await
    }

    type SubscribeToTaskStream = Events;

    async fn subscribe_to_task(
        &self,
        r: Request<pb::SubscribeToTaskRequest>,
    ) -> Result<Response<Events>, Status> {
        self.stream(Op::Subscribe, r).await
    }

    async fn create_task_push_notification_config(
        &self,
        r: Request<pb::TaskPushNotificationConfig>,
    ) -> Result<Response<pb::TaskPushNotificationConfig>, Status> {
        self.unary(Op::PushCreate, r).await
    }

    async fn get_task_push_notification_config(
        &self,
        r: Request<pb::GetTaskPushNotificationConfigRequest>,
    ) -> Result<Response<pb::TaskPushNotificationConfig>, Status> {
        self.unary(Op::PushGet, r).await
    }

    async fn list_task_push_notification_configs(
        &self,
        r: Request<pb::ListTaskPushNotificationConfigsRequest>,
    ) -> Result<Response<pb::ListTaskPushNotificationConfigsResponse>, Status> {
        self.unary(Op::PushList, r).await
    }

    async fn delete_task_push_notification_config(
        &self,
        r: Request<pb::DeleteTaskPushNotificationConfigRequest>,
    ) -> Result<Response<pbjson_types::Empty>, Status> {
        self.run(Op::PushDelete, r).await?;
        Ok(Response::new(pbjson_types::Empty {}))
    }

    async fn get_extended_agent_card(
        &self,
        r: Request<pb::GetExtendedAgentCardRequest>,
    ) -> Result<Response<pb::AgentCard>, Status> {
        self.unary(Op::ExtendedCard, r).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a2a_errors_take_the_specifications_grpc_codes_with_error_info() {
        let s = status(&A2aError::TaskNotFound("no task 'x'".into()));
        assert_eq!(s.code(), Code::NotFound);
        assert_eq!(
            s.get_details_error_info().map(|i| (i.reason, i.domain)),
            Some(("TASK_NOT_FOUND".to_string(), "a2a-protocol.org".to_string()))
        );
        assert_eq!(
            status(&A2aError::NotCancelable("x".into())).code(),
            Code::FailedPrecondition
        );
        assert_eq!(
            status(&A2aError::PushNotSupported).code(),
            Code::Unimplemented
        );
        assert_eq!(
            status(&A2aError::InvalidParams("x".into())).code(),
            Code::InvalidArgument
        );
    }

    #[test]
    fn messages_read_and_write_the_json_the_other_bindings_use() {
        let json = serde_json::json!({
            "tenant": "conformance",
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
            "configuration": {"returnImmediately": true},
        });
        let request: pb::SendMessageRequest = serde_json::from_value(json.clone()).expect("reads");
        assert_eq!(request.tenant, "conformance");
        assert_eq!(serde_json::to_value(&request).expect("writes"), json);
        let answer: pb::StreamResponse = serde_json::from_value(serde_json::json!({
            "statusUpdate": {"taskId": "t", "contextId": "c",
                             "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-12-01T00:00:00Z"}}
        }))
        .expect("an event reads");
        assert!(answer.payload.is_some());
    }

    /// The fuzzer's first finding (fuzz/seeds/grpc_message/empty-value-part):
    /// a data part holding a `google.protobuf.Value` with no kind, which no
    /// JSON carries. ProtoJSON writes it as `null` and reads that back as a
    /// part with no content, so the trip is stable only after one round;
    /// the message roostd reads from it is the data `null`, not an error or
    /// a panic.
    #[test]
    fn a_data_part_with_an_empty_value_reads_as_null_and_settles_after_one_trip() {
        let request = pb::SendMessageRequest {
            tenant: "conformance".into(),
            message: Some(pb::Message {
                message_id: "m-1".into(),
                parts: vec![pb::Part {
                    content: Some(pb::part::Content::Data(pbjson_types::Value { kind: None })),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let json = serde_json::to_value(&request).expect("writes");
        assert_eq!(json["message"]["parts"][0]["data"], Value::Null);
        let read = super::super::wire::parse_message(&json["message"]).expect("reads");
        assert_eq!(read.text, "null");
        let once: pb::SendMessageRequest = serde_json::from_value(json).expect("reads back");
        assert_ne!(
            once, request,
            "the empty Value does not survive the first trip"
        );
        let written = serde_json::to_value(&once).expect("writes again");
        let twice: pb::SendMessageRequest =
            serde_json::from_value(written).expect("reads back again");
        assert_eq!(twice, once);
    }
}
