//! Writing the journal: entries sent in the order they were queued, each
//! one's acknowledgement awaited in order (so many are in flight at once),
//! and an entry the stream cannot take just now (its leader gone, a new
//! one being elected) sent again within [`RETRY_WITHIN`].

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use tokio::sync::mpsc;

use super::super::Cluster;
use super::{Job, JournalError, subject};
use crate::tasks::log::TaskLog;

/// How long an entry is tried again while the stream cannot take it (its
/// leader gone and a new one being elected, the connection moving to
/// another server): JetStream elects within a few seconds.
const RETRY_WITHIN: Duration = Duration::from_secs(15);

/// An entry sent, as it can be sent again.
struct Sent {
    subject: String,
    message: jetstream::message::PublishMessage,
    /// Written only if the subject's last entry is still the one expected.
    expects: bool,
}

/// Whether an entry the stream did not take may be sent again. Nobody
/// answered for the stream (no leader): it was not stored, so always.
/// Its acknowledgement did not come, or the connection broke: it may have
/// been stored, and a copy is stored once (every entry has a message id,
/// the stream's duplicate window is 120 s) — but JetStream checks an
/// expected last sequence before the message id, so a copy of an entry
/// that expects one would be refused as stale: such an entry (a task's
/// first start) is not sent again then.
fn worth_again(e: &jetstream::context::PublishError, sent: &Sent) -> bool {
    use jetstream::context::PublishErrorKind as K;
    match e.kind() {
        K::StreamNotFound => true,
        K::TimedOut | K::BrokenPipe => !sent.expects,
        _ => false,
    }
}

type Done = Box<dyn FnOnce(Result<u64, JournalError>) + Send>;
type Published = Result<jetstream::context::PublishAckFuture, jetstream::context::PublishError>;

/// Awaits each entry's acknowledgement in order, sending it again (for up
/// to [`RETRY_WITHIN`]) while the stream cannot take it.
async fn acknowledged(cluster: Arc<Cluster>, mut acks: mpsc::Receiver<(Published, Sent, Done)>) {
    while let Some((published, sent, done)) = acks.recv().await {
        let until = tokio::time::Instant::now() + RETRY_WITHIN;
        let mut pause = Duration::from_millis(100);
        let mut outcome = match published {
            Ok(ack) => ack.await,
            Err(e) => Err(e),
        };
        while let Err(e) = &outcome
            && worth_again(e, &sent)
            && tokio::time::Instant::now() + pause < until
        {
            tracing::warn!(subject = %sent.subject, error = %e,
                "the cluster's task journal did not take an entry; sending it again");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            let Some(js) = cluster.jetstream() else { break };
            outcome = match js
                .send_publish(sent.subject.clone(), sent.message.clone())
                .await
            {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
        }
        done(match outcome {
            Ok(ack) => Ok(ack.sequence),
            Err(e) => Err(refusal(&e)),
        });
    }
}

/// Writes the queued entries in order, each one's acknowledgement awaited
/// in order too (so many are in flight at once).
pub(super) async fn write(
    local: Arc<dyn TaskLog>,
    cluster: Arc<Cluster>,
    mut jobs: mpsc::UnboundedReceiver<Job>,
) {
    let (acks_tx, acks) = mpsc::channel::<(Published, Sent, Done)>(4096);
    tokio::spawn(acknowledged(Arc::clone(&cluster), acks));
    while let Some(job) = jobs.recv().await {
        let Some(js) = cluster.jetstream() else {
            (job.done)(Err(JournalError::Refused(
                "this node has not joined yet".into(),
            )));
            continue;
        };
        let route = match job.route {
            Some(route) => route,
            // A task this node knew before it restarted.
            None => match local.task(&job.task).await {
                Ok(Some(task)) => task.route,
                _ => {
                    (job.done)(Err(JournalError::Refused("no such task here".into())));
                    continue;
                }
            },
        };
        if job.unless_moved
            && let Some(node) = cluster.holder(&route).filter(|n| n != cluster.node())
        {
            (job.done)(Err(JournalError::Moved(node)));
            continue;
        }
        let mut message = jetstream::message::PublishMessage::build()
            .payload(serde_json::to_vec(&job.entry).unwrap_or_default().into());
        if let Some(seq) = job.expect {
            message = message.expected_last_subject_sequence(seq);
        }
        // A task's first entry is one per task whichever node sends it;
        // every other entry is its own, so a copy sent again is not stored
        // twice either.
        message = message.message_id(if job.dedupe {
            job.task.to_string()
        } else {
            format!("{}.{}", job.task, uuid::Uuid::now_v7().simple())
        });
        let sent = Sent {
            subject: subject(&route, &job.task),
            message,
            expects: job.expect.is_some(),
        };
        let published = js
            .send_publish(sent.subject.clone(), sent.message.clone())
            .await;
        if let Err(mpsc::error::SendError((_, _, done))) =
            acks_tx.send((published, sent, job.done)).await
        {
            done(Err(JournalError::Refused("roostd is stopping".into())));
        }
    }
}

fn refusal(e: &jetstream::context::PublishError) -> JournalError {
    match e.kind() {
        jetstream::context::PublishErrorKind::WrongLastSequence => {
            JournalError::Moved("another node".into())
        }
        _ => JournalError::Refused(e.to_string()),
    }
}
