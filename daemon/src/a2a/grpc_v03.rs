//! A2A 0.3's gRPC service (`a2a.v1.A2AService`, from `proto/v03/a2a.proto`)
//! beside 1.0's on the gateway's port: each method is the 1.0 operation it
//! names, run by the same [`Grpc`] with 0.3's messages read and written
//! through [`super::v03_proto`]. 0.3 has no tenant, so it serves the route
//! `a2a.grpc.default_route` names.

use tonic::{Request, Response, Status};

use super::Gateway;
use super::MAX_BODY_BYTES;
use super::envelope::Op;
use super::grpc::{Events, Grpc, pb03};
use pb03::a2a_service_server::{A2aService, A2aServiceServer};

/// Where 0.3's service is routed on the gateway.
pub const PATH: &str = "/a2a.v1.A2AService/{*rest}";

/// 0.3's service, to route at [`PATH`].
pub(super) fn service(gw: &Gateway, default_route: Option<&str>) -> A2aServiceServer<Grpc03> {
    A2aServiceServer::new(Grpc03(Grpc::v03(gw, default_route)))
        .max_decoding_message_size(MAX_BODY_BYTES)
}

/// 0.3's service, on 1.0's.
#[derive(Clone)]
pub(super) struct Grpc03(Grpc);

type Events03 = Events<pb03::StreamResponse>;

#[tonic::async_trait]
impl A2aService for Grpc03 {
    async fn send_message(
        &self,
        r: Request<pb03::SendMessageRequest>,
    ) -> Result<Response<pb03::SendMessageResponse>, Status> {
        self.0.unary(Op::Send, r).await
    }

    type SendStreamingMessageStream = Events03;

    async fn send_streaming_message(
        &self,
        r: Request<pb03::SendMessageRequest>,
    ) -> Result<Response<Events03>, Status> {
        self.0.stream(Op::Stream, r).await
    }

    async fn get_task(
        &self,
        r: Request<pb03::GetTaskRequest>,
    ) -> Result<Response<pb03::Task>, Status> {
        self.0.unary(Op::Get, r).await
    }

    async fn cancel_task(
        &self,
        r: Request<pb03::CancelTaskRequest>,
    ) -> Result<Response<pb03::Task>, Status> {
        self.0.unary(Op::Cancel, r).await
    }

    type TaskSubscriptionStream = Events03;

    async fn task_subscription(
        &self,
        r: Request<pb03::TaskSubscriptionRequest>,
    ) -> Result<Response<Events03>, Status> {
        self.0.stream(Op::Subscribe, r).await
    }

    async fn create_task_push_notification_config(
        &self,
        r: Request<pb03::CreateTaskPushNotificationConfigRequest>,
    ) -> Result<Response<pb03::TaskPushNotificationConfig>, Status> {
        self.0.unary(Op::PushCreate, r).await
    }

    async fn get_task_push_notification_config(
        &self,
        r: Request<pb03::GetTaskPushNotificationConfigRequest>,
    ) -> Result<Response<pb03::TaskPushNotificationConfig>, Status> {
        self.0.unary(Op::PushGet, r).await
    }

    async fn list_task_push_notification_config(
        &self,
        r: Request<pb03::ListTaskPushNotificationConfigRequest>,
    ) -> Result<Response<pb03::ListTaskPushNotificationConfigResponse>, Status> {
        self.0.unary(Op::PushList, r).await
    }

    /// 0.3 clients ask for the card over gRPC only when it says it has an
    /// authenticated extended one: this answers that card.
    async fn get_agent_card(
        &self,
        r: Request<pb03::GetAgentCardRequest>,
    ) -> Result<Response<pb03::AgentCard>, Status> {
        self.0.unary(Op::ExtendedCard, r).await
    }

    async fn delete_task_push_notification_config(
        &self,
        r: Request<pb03::DeleteTaskPushNotificationConfigRequest>,
    ) -> Result<Response<pbjson_types::Empty>, Status> {
        self.0.done(Op::PushDelete, r).await?;
        Ok(Response::new(pbjson_types::Empty {}))
    }
}
