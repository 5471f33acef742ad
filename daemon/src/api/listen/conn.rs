//! What one connection of a listener may hold, beyond its request heads:
//! the requests it has open (a response not yet sent to its end counts,
//! so an SSE or gRPC stream does), so a connection with none for the idle
//! timeout is closed whatever its protocol (an HTTP/2 client that only
//! answers pings holds a slot otherwise); a deadline for each request's
//! whole body; and the connections one client address holds.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::Response;
use http_body::Frame;
use tower::ServiceExt;

/// The router of one connection: every request counted while it is open,
/// its body read under a deadline.
#[derive(Clone)]
pub(super) struct Tracked {
    pub(super) router: Router,
    pub(super) activity: Arc<Activity>,
    pub(super) body_timeout: Duration,
}

/// What a connection has open, and when that last changed: kept with
/// atomics, so a request wakes nothing (the watchdog looks when its time
/// is up).
pub(super) struct Activity {
    open: AtomicUsize,
    /// Milliseconds since `epoch` at the last open or close.
    last: AtomicU64,
    epoch: tokio::time::Instant,
}

impl Activity {
    pub(super) fn new() -> Self {
        Self {
            open: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            epoch: tokio::time::Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn touch(&self) {
        self.last.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Requests open now.
    pub(super) fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

impl<B> tower::Service<http::Request<B>> for Tracked
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let open = Open::new(&self.activity);
        let deadline = tokio::time::Instant::now() + self.body_timeout;
        let request: Request = request.map(|body| {
            Body::new(Deadline {
                inner: Body::new(body),
                deadline,
                sleep: None,
            })
        });
        let router = self.router.clone();
        Box::pin(async move {
            let response = match router.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok(response.map(|inner| Body::new(Counted { inner, _open: open })))
        })
    }
}

/// One open request of a connection: counted from its head until its
/// response has been sent whole (or dropped).
struct Open(Arc<Activity>);

impl Open {
    fn new(activity: &Arc<Activity>) -> Self {
        activity.touch();
        activity.open.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(activity))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.touch();
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request counted until it is done.
struct Counted {
    inner: Body,
    _open: Open,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that must arrive whole within its deadline (its timer
/// made only once the body keeps it waiting: most arrive with their head).
struct Deadline {
    inner: Body,
    deadline: tokio::time::Instant,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// A request body that did not arrive within `http.body_read_timeout_secs`.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within http.body_read_timeout_secs")]
pub struct BodyTimedOut;

impl http_body::Body for Deadline {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = self.deadline;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Resolves once the connection has had no open request for `after`: it
/// looks when that time would be up (a request opened or closed meanwhile,
/// however briefly, moves it on).
pub(super) async fn idle(activity: &Activity, after: Duration) {
    let after_ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
    loop {
        let since = activity
            .now_ms()
            .saturating_sub(activity.last.load(Ordering::Relaxed));
        if activity.open() == 0 && since >= after_ms {
            return;
        }
        let wait = after_ms.saturating_sub(since).max(1);
        tokio::time::sleep(Duration::from_millis(wait.min(after_ms.max(1)))).await;
    }
}

/// The connections each client holds: its address, or for IPv6 its /64
/// (one host's usual share).
#[derive(Default)]
pub(super) struct Clients(Mutex<HashMap<IpAddr, usize>>);

/// One connection's share of its client's.
pub(super) struct ClientSlot {
    clients: Arc<Clients>,
    key: IpAddr,
}

impl Clients {
    /// A slot for a connection from `ip`, unless it holds `max` already.
    pub(super) fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<ClientSlot> {
        let key = client_key(ip);
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let count = held.entry(key).or_insert(0);
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            clients: Arc::clone(self),
            key,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut held = self.clients.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// Whom a connection from `ip` counts against.
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & (!0u128 << 64)).into()),
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_holds_at_most_its_share_and_its_slots_come_back() {
        let clients = Arc::new(Clients::default());
        let a: IpAddr = "127.0.0.1".parse().expect("ip");
        let slots: Vec<_> = (0..3).filter_map(|_| clients.take(a, 3)).collect();
        assert_eq!(slots.len(), 3);
        assert!(clients.take(a, 3).is_none(), "past its share");
        // The control: another address, and the same one as IPv4 in IPv6.
        assert!(clients.take("127.0.0.2".parse().expect("ip"), 3).is_some());
        assert!(
            clients
                .take("::ffff:127.0.0.1".parse().expect("ip"), 3)
                .is_none()
        );
        drop(slots);
        assert!(clients.take(a, 3).is_some(), "slots given back");
        // One IPv6 /64 is one client.
        let one: IpAddr = "2001:db8:1:2::1".parse().expect("ip");
        let other: IpAddr = "2001:db8:1:2:ffff::9".parse().expect("ip");
        let _held = clients.take(one, 1).expect("first");
        assert!(clients.take(other, 1).is_none());
        assert!(
            clients
                .take("2001:db8:1:3::1".parse().expect("ip"), 1)
                .is_some()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_only_while_nothing_is_open_for_the_timeout() {
        let activity = Arc::new(Activity::new());
        let started = tokio::time::Instant::now();
        let open = Open::new(&activity);
        let closer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(open);
        });
        idle(&activity, Duration::from_secs(2)).await;
        assert!(
            started.elapsed() >= Duration::from_secs(7),
            "{:?}",
            started.elapsed()
        );
        closer.await.expect("closer");
        // A request that opens and closes at once is activity too.
        let started = tokio::time::Instant::now();
        drop(Open::new(&activity));
        let brief = tokio::spawn({
            let activity = Arc::clone(&activity);
            async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                drop(Open::new(&activity));
            }
        });
        idle(&activity, Duration::from_secs(2)).await;
        assert!(
            started.elapsed() >= Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        brief.await.expect("brief");
    }
}
