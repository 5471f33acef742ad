//! What a start request sets for one session: the lifecycle over the
//! manifest's (`roostctl start --lifecycle … --after-task …`), the job id
//! every guest sees, and an evaluation's variables only hooks see.

use std::path::Path;
use std::time::{Duration, Instant};

use roost_ctl::api::{AfterTask, SessionState, StartRequest, TaskAcceptance};
use serde_json::json;

use crate::a2a::{message, rpc};
use crate::agents::{agent, agent_daemon, with_task};
use crate::harness::{capsule, code};
use crate::mock_llm::{MockLlm, Reply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_overrides_the_lifecycle_and_gives_a_job_id_and_hooks_the_evaluation() {
    let daemon = agent_daemon().await;
    let mock = MockLlm::start(|seen| {
        if seen.messages().len() == 1 {
            Reply::tools(&[("sh", r#"{"command":"env"}"#)])
        } else {
            Reply::text("looked")
        }
    })
    .await;
    // The manifest says `single` (the default): one task, then the end.
    let dir = agent(daemon.root.path(), "lively", &mock, "", "");
    let request = StartRequest {
        lifecycle: Some(TaskAcceptance::Queue),
        after_task: Some(AfterTask::Sleep),
        job_id: Some("job-7".into()),
        eval_config: Some(r#"{"grader":"exact"}"#.into()),
        case_id: Some("case-3".into()),
        dataset_id: Some("ds-1".into()),
        ..with_task(&dir, "Look around.")
    };
    let s = daemon.client.start(&request).await.expect("start");

    // Its task.md task ends, and the session stays for more (queue + sleep).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let tasks = daemon.client.tasks(&s.id).await.expect("tasks");
        if tasks.first().is_some_and(|t| t.state == "completed") {
            break;
        }
        assert!(Instant::now() < deadline, "{tasks:?}\n{}", daemon.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let now = daemon.client.get(&s.id).await.expect("get");
    assert_eq!(now.state, SessionState::Running, "{now:?}");
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let r = rpc(
        &addr,
        "lively",
        Some("1.0"),
        "SendMessage",
        json!({"message": message("l-1", "again")}),
    )
    .await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );

    // The tool saw the job id, not the evaluation; the hook saw both.
    let env = mock.seen()[1].tool_results().join("\n");
    assert!(env.contains("MURMUR_JOB_ID=job-7"), "{env}");
    assert!(
        !env.contains("MURMUR_EVAL_CONFIG") && !env.contains("case-3"),
        "{env}"
    );
    let hook =
        std::fs::read_to_string(Path::new(&s.workdir).join("hook-env.txt")).expect("hook env");
    assert_eq!(
        hook,
        "MURMUR_JOB_ID=job-7\nMURMUR_EVAL_CONFIG={\"grader\":\"exact\"}\nMURMUR_CASE_ID=case-3\n\
         MURMUR_DATASET_ID=ds-1\n"
    );
    daemon.client.stop(&s.id).await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifecycle_for_a_capsule_that_takes_no_tasks_is_refused() {
    let daemon = agent_daemon().await;
    let hello = capsule(daemon.root.path(), "hello", "hello", "");
    let err = daemon
        .client
        .start(&StartRequest {
            lifecycle: Some(TaskAcceptance::Queue),
            ..crate::harness::request(&hello)
        })
        .await
        .expect_err("refused");
    assert_eq!(code(&err), "bad_request", "{err}");
    assert!(err.to_string().contains("--lifecycle"), "{err}");
    assert!(
        daemon.client.list(true).await.expect("list").is_empty(),
        "nothing started"
    );
}
