//! A cluster under faults, against real `nats-server -js` clusters: what a
//! node promises when a NATS server it depends on dies.

use std::time::{Duration, Instant};

use roost_wire::api::StartRequest;
use serde_json::json;

use crate::a2a::{JSON, V1, http, message};
use crate::cluster::nats_cluster;
use crate::harness::{Daemon, TEST_CONFIG, conformance, request};

/// The server (`nats-<i>`) that leads the task journal's stream, as a
/// client of `server` reads it.
async fn journal_leader(server: &crate::nats::Nats) -> Option<String> {
    let js = async_nats::jetstream::new(server.client().await);
    let mut stream = js.get_stream("ROOST_TASKS").await.ok()?;
    let info = stream.info().await.ok()?;
    info.cluster.as_ref().and_then(|c| c.leader.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_journals_stream_leader_keeps_every_send_succeeding() {
    let Some(mut servers) = nats_cluster() else {
        return;
    };
    let urls: Vec<String> = servers.iter().map(|s| format!("\"{}\"", s.url)).collect();
    let config = |node: &str, auth: &str| {
        format!(
            "{TEST_CONFIG}cluster: {{servers: [{}], {auth}, node: {node}, node_ttl_secs: 3, replicas: 3}}\n",
            urls.join(", ")
        )
    };
    let a = Daemon::start_with(&config("a", &servers[0].auth()), &[]).await;
    let addr = a.client.health().await.expect("health").a2a_addr;
    let dir = conformance(
        a.root.path(),
        "echo",
        "{task_acceptance: queue, after_task: sleep}",
        "",
    );
    a.client
        .start(&StartRequest {
            name: Some("echo".into()),
            ..request(&dir)
        })
        .await
        .expect("start");
    let send = |id: String| {
        let addr = addr.clone();
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": message(&id, "hello")}})
            .to_string();
            let (status, _, answer) = http(&addr, "POST", "/a2a/echo", &[V1, JSON], &body).await;
            (status, answer)
        }
    };
    // The journal exists once a task was journaled.
    let (status, answer) = send("lead-0".into()).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("TASK_STATE_COMPLETED"), "{answer}");
    let deadline = Instant::now() + Duration::from_secs(15);
    let leader = loop {
        if let Some(leader) = journal_leader(&servers[0]).await {
            break leader;
        }
        assert!(
            Instant::now() < deadline,
            "the journal's stream has no leader"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let at = servers
        .iter()
        .position(|s| s.name == leader)
        .expect("the leader is one of the three");
    // The stream's leader dies (SIGKILL); sends go on at once.
    drop(servers.remove(at));
    let mut completed = 0;
    let mut refused = Vec::new();
    for i in 1..=20 {
        let (status, answer) = send(format!("lead-{i}")).await;
        if status == 200 && answer.contains("TASK_STATE_COMPLETED") {
            completed += 1;
        } else {
            refused.push(format!("{status}: {answer}"));
        }
    }
    assert_eq!(completed, 20, "{refused:?}\n{}", a.log());
    // The control: the stream did lose its leader, and has another now.
    let now = journal_leader(&servers[0]).await;
    assert!(
        now.as_ref().is_some_and(|n| *n != leader),
        "{now:?} after {leader}"
    );
}

/// What sending a journal entry again rests on: JetStream takes a copy of
/// an entry it stored (its acknowledgement lost) as that entry when it
/// carries the same `Nats-Msg-Id` — but checks an expected last subject
/// sequence first, so a copy of an entry that expects one is refused as
/// stale (which is why the journal sends a task's first start again only
/// when nobody answered for the stream).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_sent_again_is_the_same_entry_unless_it_expects_a_sequence() {
    let Some(server) = crate::cluster::nats() else {
        return;
    };
    let js = async_nats::jetstream::new(server.client().await);
    js.get_or_create_stream(async_nats::jetstream::stream::Config {
        name: "PROBE".into(),
        subjects: vec!["probe.>".into()],
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .expect("stream");
    let entry = |id: &str, expect: Option<u64>| {
        let message = async_nats::jetstream::message::PublishMessage::build()
            .payload("entry".into())
            .message_id(id);
        match expect {
            Some(seq) => message.expected_last_subject_sequence(seq),
            None => message,
        }
    };
    let publish = |message| {
        let js = js.clone();
        async move {
            js.send_publish("probe.task", message)
                .await
                .expect("publish")
                .await
        }
    };
    let first = publish(entry("t.1", None)).await.expect("stored");
    assert!(!first.duplicate);
    // The same entry again (its ack lost): the same sequence, a duplicate.
    let again = publish(entry("t.1", None)).await.expect("the same entry");
    assert!(
        again.duplicate && again.sequence == first.sequence,
        "{again:?}"
    );
    // An entry that expects the last sequence is stored ...
    let start = publish(entry("t.2", Some(first.sequence)))
        .await
        .expect("stored");
    // ... and its copy is refused as stale, its message id notwithstanding.
    let copy = publish(entry("t.2", Some(first.sequence))).await;
    let refused = copy.expect_err("a stale expected sequence");
    assert_eq!(
        refused.kind(),
        async_nats::jetstream::context::PublishErrorKind::WrongLastSequence,
        "after {start:?}"
    );
}

/// Requests other nodes send are answered a bounded number at once: past
/// 64 carried control calls, a node says at once that it is busy; past one
/// drain, that one is under way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answers_a_bounded_number_of_requests_and_says_busy_past_them() {
    use roostd::cluster::control::{Answered, Forwarded};
    let Some(nats) = crate::cluster::nats() else {
        return;
    };
    let a = Daemon::start_with(&crate::cluster::node_config(&nats, "a"), &[]).await;
    let _b = Daemon::start_with(&crate::cluster::node_config(&nats, "b"), &[]).await;
    let dir = conformance(
        a.root.path(),
        "held",
        "{task_acceptance: queue, after_task: sleep}",
        "",
    );
    let session = a
        .client
        .start(&StartRequest {
            name: Some("held".into()),
            node: Some("a".into()),
            ..request(&dir)
        })
        .await
        .expect("start");
    let client = nats.client().await;
    let carried = |path: String| {
        let client = client.clone();
        async move {
            let call = Forwarded::new("GET", &path, None, &[]).by("the test".into());
            let asked = async_nats::Request::new()
                .payload(serde_json::to_vec(&call).expect("call").into())
                .timeout(Some(Duration::from_secs(30)));
            let reply = client
                .send_request("roost.control.a", asked)
                .await
                .expect("an answer");
            serde_json::from_slice::<Answered>(&reply.payload).expect("answered")
        }
    };
    // 64 calls that each wait 6 s on the live session hold every slot ...
    let waits: Vec<_> = (0..64)
        .map(|_| {
            tokio::spawn(carried(format!(
                "/v1/sessions/{}/wait?timeout_secs=6",
                session.id
            )))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // ... so a 65th hears at once that the node is busy.
    let started = Instant::now();
    let busy = carried(format!("/v1/sessions/{}", session.id)).await;
    assert_eq!(
        busy.status,
        503,
        "{}",
        String::from_utf8_lossy(&busy.body())
    );
    assert!(String::from_utf8_lossy(&busy.body()).contains("at once"));
    assert!(started.elapsed() < Duration::from_secs(3));
    for wait in waits {
        assert_eq!(wait.await.expect("join").status, 200);
    }
    // The control: with the slots free, the same call is answered.
    let answered = carried(format!("/v1/sessions/{}", session.id)).await;
    assert_eq!(answered.status, 200);

    // Two drains of a at once: one drains, the other is told it is under way.
    let drain = |timeout: u64| {
        let client = client.clone();
        async move {
            let body = serde_json::to_vec(&roost_wire::api::DrainRequest {
                node: "a".into(),
                timeout_secs: Some(timeout),
            })
            .expect("drain");
            let asked = async_nats::Request::new()
                .payload(body.into())
                .timeout(Some(Duration::from_secs(60)));
            let reply = client
                .send_request("roost.drain.a", asked)
                .await
                .expect("an answer");
            String::from_utf8_lossy(&reply.payload).into_owned()
        }
    };
    let (first, second) = tokio::join!(drain(5), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        drain(5).await
    });
    let (report, refused) = if first.contains("refused") {
        (second, first)
    } else {
        (first, second)
    };
    assert!(refused.contains("already under way"), "{refused}");
    assert!(report.contains("\"sessions\""), "{report}");
}
