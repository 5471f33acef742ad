//! Outgoing wasi-http requests: denied unless `capabilities.network.allow`
//! matches; sent by [`crate::http_client`].

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use http_body_util::BodyExt;

use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use crate::http_client::{self, HttpError as ClientError, Timeouts};

use crate::policy::{CapabilityPolicy, default_port};

/// Something a guest did that an agent's trace records: a request the
/// policy refused (`denied`), an A2A message sent (`a2a_send`).
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    pub event: &'static str,
    pub fields: serde_json::Value,
}

/// Where a session collects its guests' notes (the agent loop traces them).
#[derive(Debug, Default)]
pub struct Notes(std::sync::Mutex<Vec<Note>>);

impl Notes {
    pub(crate) fn push(&self, note: Note) {
        if let Ok(mut list) = self.0.lock() {
            // Bounded: a guest hammering a denied host cannot grow it forever.
            if list.len() < 1000 {
                list.push(note);
            }
        }
    }

    /// Everything recorded since the last call.
    pub fn take(&self) -> Vec<Note> {
        self.0
            .lock()
            .map(|mut list| std::mem::take(&mut *list))
            .unwrap_or_default()
    }
}

/// Hooks installed in every guest's wasi-http context.
pub(crate) struct NetworkPolicyHooks {
    pub(crate) policy: Arc<CapabilityPolicy>,
    pub(crate) session_id: Arc<str>,
    pub(crate) notes: Option<Arc<Notes>>,
}

type SendFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
                ),
                HttpError,
            >,
        > + Send,
>;

impl NetworkPolicyHooks {
    pub(crate) fn allowed(&self, uri: &http::Uri) -> bool {
        let scheme = uri.scheme_str().unwrap_or("https").to_ascii_lowercase();
        let Some(host) = uri.host() else {
            return false;
        };
        let Some(port) = uri.port_u16().or_else(|| default_port(&scheme)) else {
            return false;
        };
        self.policy.allows_url(&scheme, host, port)
    }
}

impl NetworkPolicyHooks {
    /// Records a refused request for the agent's trace.
    pub(crate) fn denied(&self, target: &str) {
        if let Some(notes) = &self.notes {
            notes.push(Note {
                event: "denied",
                fields: serde_json::json!({
                    "kind": "network", "target": target, "rule": "capabilities.network.allow",
                }),
            });
        }
    }
}

impl WasiHttpHooks for NetworkPolicyHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> SendFuture {
        if !self.allowed(request.uri()) {
            let target = crate::policy::redact_url(&request.uri().to_string());
            tracing::warn!(
                session_id = %self.session_id,
                uri = %target,
                "outgoing HTTP denied: not in capabilities.network.allow"
            );
            self.denied(&target);
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        }
        _ = fut;
        // wasi-http's own defaults: ten minutes for each deadline.
        let default = Duration::from_secs(600);
        let options = options.unwrap_or_default();
        let timeouts = Timeouts {
            connect: options.connect_timeout.unwrap_or(default),
            first_byte: options.first_byte_timeout.unwrap_or(default),
            between_bytes: options.between_bytes_timeout.unwrap_or(default),
        };
        Box::new(http_client::send(request, timeouts).map(|sent| {
            let response = sent.map_err(wasi_error)?;
            Ok((
                response.map(|body| body.map_err(wasi_error).boxed_unsync()),
                Box::new(async { Ok(()) })
                    as Box<dyn Future<Output = Result<(), HttpError>> + Send>,
            ))
        }))
    }
}

/// The wasi-http error code a guest sees for a failed request.
fn wasi_error(e: ClientError) -> HttpError {
    match e {
        ClientError::Uri(_) | ClientError::ServerName(_) => HttpError::HttpRequestUriInvalid,
        ClientError::Connect(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            HttpError::ConnectionRefused
        }
        ClientError::Connect(e) => HttpError::Connect(e),
        ClientError::ConnectTimeout(_) => HttpError::ConnectionTimeout,
        ClientError::Tls(e) => HttpError::Tls(e),
        ClientError::FirstByteTimeout(_) | ClientError::ReadTimeout(_) => {
            HttpError::ConnectionReadTimeout
        }
        ClientError::Incomplete => HttpError::HttpResponseIncomplete,
        ClientError::HeadTooLarge => HttpError::HttpResponseHeaderSectionSize(None),
        ClientError::Protocol(_) => HttpError::HttpProtocolError,
        // The guest's own body error (its size check, say) goes back as it was.
        ClientError::Body(e) => match e.downcast::<HttpError>() {
            Ok(e) => *e,
            Err(e) => HttpError::InternalError(Some(e.to_string())),
        },
        ClientError::Write(_) | ClientError::Read(_) => HttpError::ConnectionTerminated,
        // `exchange`'s own (guests' requests never go through it).
        ClientError::NotHttp | ClientError::Request(_) => HttpError::HttpRequestUriInvalid,
        ClientError::TooLarge(size) => HttpError::HttpResponseBodySize(Some(size)),
        ClientError::Timeout(_) => HttpError::ConnectionReadTimeout,
        ClientError::Proxy(why) => HttpError::InternalError(Some(format!("proxy: {why}"))),
    }
}
