//! The deliverer: drains the push outbox — each event of a task to each of
//! its configs, at least once, in log order per config, retried with
//! backoff, across restarts — with at most `max_in_flight_per_host`
//! deliveries to one receiver and none waiting on another's.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio_util::sync::CancellationToken;

use super::{DELIVERY_TIMEOUT, PushPolicy};
use crate::a2a::wire::{self, Dialect, Shape};
use crate::store::now_ms;
use crate::tasks::{Broker, PushDelivery, PushVersion};

/// Tries of one delivery before it is given up (backoff 1 s, 2 s, … up to
/// [`MAX_BACKOFF`]: about 13 minutes in all).
pub const MAX_ATTEMPTS: u32 = 10;
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Longest sleep of an idle deliverer (milliseconds): commits that queue
/// deliveries wake it, so this is only a safety net.
const MAX_SLEEP_MS: i64 = 60_000;
/// Deliveries in flight at once.
const IN_FLIGHT: u32 = 16;

/// How a delivery went.
enum Outcome {
    Delivered,
    /// Not worth trying again (the receiver refused it, the URL is now
    /// refused, the task or event is gone).
    Dropped(String),
    Retry(String),
}

/// Drains the outbox until `stop`: what is due, each config's deliveries in
/// log order, up to [`IN_FLIGHT`] at once and `max_in_flight_per_host` to
/// one host. Each delivery ends on its own: a slow receiver holds only its
/// own slots, never a batch that deliveries to others wait on.
pub async fn deliver(broker: Arc<Broker>, policy: Arc<PushPolicy>, stop: CancellationToken) {
    let wake = broker.push_wake();
    let mut running = tokio::task::JoinSet::new();
    // Outbox rows being delivered (the outbox answers them as due until
    // they are done), and deliveries per host.
    let mut in_flight = std::collections::HashSet::new();
    let mut per_host: std::collections::HashMap<String, usize> = Default::default();
    loop {
        // Due deliveries left waiting for a busy host: the next look is
        // when one in flight ends (not at their due time, which has passed).
        let mut waiting = false;
        if running.len() < IN_FLIGHT as usize {
            // Enough rows to look past those in flight or waiting on a busy
            // host.
            let look = IN_FLIGHT * 4 + in_flight.len() as u32;
            let due = match broker.due_pushes(now_ms(), look).await {
                Ok(due) => due,
                Err(error) => {
                    tracing::warn!(%error, "cannot read the push outbox");
                    Vec::new()
                }
            };
            for d in due {
                if running.len() >= IN_FLIGHT as usize {
                    break;
                }
                let host = receiver_host(&d.config.url);
                let busy = per_host.get(&host).copied().unwrap_or(0);
                if in_flight.contains(&d.outbox_id) {
                    continue;
                }
                if busy >= policy.per_host {
                    waiting = true;
                    continue;
                }
                in_flight.insert(d.outbox_id);
                *per_host.entry(host.clone()).or_default() += 1;
                let (broker, policy) = (Arc::clone(&broker), Arc::clone(&policy));
                let outbox_id = d.outbox_id;
                running.spawn(async move {
                    deliver_one(&broker, &policy, d).await;
                    (outbox_id, host)
                });
            }
        }
        // Sleep until the next retry, or until a commit queues deliveries
        // (nothing polls an empty outbox), or one in flight ends (rows in
        // flight stay due until then: the next look is after one ends).
        let wait = if waiting || !running.is_empty() {
            Duration::from_millis(MAX_SLEEP_MS as u64)
        } else {
            match broker.next_push_at().await {
                Ok(Some(at)) => {
                    Duration::from_millis((at - now_ms()).clamp(1, MAX_SLEEP_MS) as u64)
                }
                Ok(None) => Duration::from_millis(MAX_SLEEP_MS as u64),
                Err(error) => {
                    tracing::warn!(%error, "cannot read the push outbox");
                    Duration::from_secs(1)
                }
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            Some(done) = running.join_next(), if !running.is_empty() => {
                if let Ok((outbox_id, host)) = done {
                    in_flight.remove(&outbox_id);
                    if let Some(n) = per_host.get_mut(&host) {
                        *n -= 1;
                        if *n == 0 {
                            per_host.remove(&host);
                        }
                    }
                }
            }
            () = wake.notified() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// The host a push URL names (lower case, port aside): what the per-host
/// limit counts.
fn receiver_host(url: &str) -> String {
    url.parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(str::to_ascii_lowercase))
        .unwrap_or_default()
}

async fn deliver_one(broker: &Broker, policy: &PushPolicy, d: PushDelivery) {
    let (task_id, config_id) = (d.config.task_id.clone(), d.config.id.clone());
    let outcome = attempt(broker, policy, &d).await;
    let result = match outcome {
        Outcome::Delivered => {
            tracing::debug!(task_id = %task_id, config = %config_id, seq = d.event_seq, "push notification delivered");
            broker.push_done(d.outbox_id).await
        }
        Outcome::Dropped(why) => {
            tracing::warn!(task_id = %task_id, config = %config_id, seq = d.event_seq, %why, "push notification dropped");
            broker.push_done(d.outbox_id).await
        }
        Outcome::Retry(why) if d.attempts + 1 >= MAX_ATTEMPTS => {
            tracing::warn!(task_id = %task_id, config = %config_id, seq = d.event_seq, %why, attempts = d.attempts + 1, "push notification given up");
            broker.push_done(d.outbox_id).await
        }
        Outcome::Retry(why) => {
            let backoff = Duration::from_secs(1u64 << d.attempts.min(16)).min(MAX_BACKOFF);
            tracing::info!(task_id = %task_id, config = %config_id, seq = d.event_seq, %why, retry_in_secs = backoff.as_secs(), "push notification failed; will retry");
            let next = now_ms() + backoff.as_millis() as i64;
            broker.push_retry(d.outbox_id, next, &why).await
        }
    };
    if let Err(error) = result {
        tracing::warn!(%error, task_id = %task_id, "cannot record a push delivery");
    }
}

async fn attempt(broker: &Broker, policy: &PushPolicy, d: &PushDelivery) -> Outcome {
    let task_id = &d.config.task_id;
    let task = match broker.task(task_id).await {
        Ok(Some(t)) => t,
        Ok(None) => return Outcome::Dropped("the task is gone".into()),
        Err(e) => return Outcome::Retry(e.to_string()),
    };
    // A 0.3 receiver is sent the whole task as of the event: its log up to
    // there; a 1.0 one the event alone.
    let after = match d.config.version {
        PushVersion::V10 => d.event_seq.saturating_sub(1),
        PushVersion::V03 => 0,
    };
    let mut events = match broker.events(task_id, after).await {
        Ok(events) => events,
        Err(e) => return Outcome::Retry(e.to_string()),
    };
    events.retain(|e| e.seq <= d.event_seq);
    let Some(event) = events.iter().find(|e| e.seq == d.event_seq) else {
        return Outcome::Dropped("the event is gone".into());
    };
    // A client's own input is not news to it. A 1.0 receiver reads the
    // event; a 0.3 one the whole task after it, in 0.3's shape.
    let Some(body) = wire::event(&task, event, Dialect::V10) else {
        return Outcome::Delivered;
    };
    let body = match d.config.version {
        PushVersion::V10 => body,
        PushVersion::V03 => wire::task_with_log(&task, &events, Dialect::V03, Shape::default()),
    };
    let target = match policy.check(&d.config.url).await {
        Ok(Some(t)) => t,
        Ok(None) => return Outcome::Retry("its host does not resolve".into()),
        Err(why) => return Outcome::Dropped(why),
    };
    let event_id = format!("{task_id}:{}", d.event_seq);
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .uri(&d.config.url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::USER_AGENT, "roostd")
        .header("Roost-Event-Id", &event_id);
    if let Some(token) = &d.config.token {
        request = request.header("X-A2A-Notification-Token", token);
    }
    if let (Some(scheme), Some(cred)) = (&d.config.auth_scheme, &d.config.auth_credentials) {
        request = request.header(http::header::AUTHORIZATION, format!("{scheme} {cred}"));
    }
    let request = match request.body(Full::new(Bytes::from(body.to_string()))) {
        Ok(r) => r,
        Err(e) => return Outcome::Dropped(format!("cannot build the request: {e}")),
    };
    let timeouts = crate::http_client::Timeouts {
        connect: DELIVERY_TIMEOUT,
        first_byte: DELIVERY_TIMEOUT,
        between_bytes: DELIVERY_TIMEOUT,
    };
    let sent = tokio::time::timeout(DELIVERY_TIMEOUT, async {
        let response = crate::http_client::send_via(request, timeouts, Some(target.addr)).await?;
        let status = response.status();
        // The answer's body is not needed: read a little of it, so the
        // receiver is not cut off mid-write.
        let mut body = response.into_body();
        let mut read = 0usize;
        while read < 64 * 1024
            && let Some(frame) = body.frame().await
        {
            read += frame?.into_data().map_or(0, |d| d.len());
        }
        Ok::<_, crate::http_client::HttpError>(status)
    })
    .await;
    match sent {
        Err(_) => Outcome::Retry(format!("no answer within {}s", DELIVERY_TIMEOUT.as_secs())),
        Ok(Err(e)) => Outcome::Retry(e.to_string()),
        Ok(Ok(status)) if status.is_success() => Outcome::Delivered,
        Ok(Ok(status))
            if status.is_server_error()
                || status == http::StatusCode::REQUEST_TIMEOUT
                || status == http::StatusCode::TOO_MANY_REQUESTS =>
        {
            Outcome::Retry(format!("the receiver answered {status}"))
        }
        Ok(Ok(status)) => Outcome::Dropped(format!("the receiver refused it: {status}")),
    }
}
