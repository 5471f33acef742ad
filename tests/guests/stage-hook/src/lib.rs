//! Test hook (`murmur:hook/handler@0.1.0`): records every event kind in
//! `./hook-events.txt`, and on `session-start` the start request's
//! variables it sees (`MURMUR_JOB_ID`, the evaluation's) in
//! `./hook-env.txt`; on `task-start`, the trace it was given
//! (`TRACEPARENT`, `OTEL_EXPORTER_OTLP_ENDPOINT`) in `./hook-trace.txt`. On `stage` it refuses capsules whose name starts with
//! `reject`; for capsules named `hookcompact*` it answers `compaction` with
//! a summary; for `badhook*` it fails `task-start`, and for `slowhook*` it
//! spins on `task-start` until its deadline.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:hook/hook@0.1.0",
    generate_all,
});

use exports::murmur::hook::handler::{Event, Guest};

struct Hook;

fn capsule_is(payload: &str, prefix: &str) -> bool {
    payload.contains(&format!("\"capsule\":\"{prefix}"))
}

impl Guest for Hook {
    fn handle(event: Event) -> Result<Option<String>, String> {
        if event.kind == "stage" && capsule_is(&event.payload, "reject") {
            return Err("capsules named reject-* may not be staged here".into());
        }
        if event.kind == "session-start" {
            // What a start request gave hooks (`--job-id`, an evaluation's ids).
            let seen: String = [
                "MURMUR_JOB_ID",
                "MURMUR_EVAL_CONFIG",
                "MURMUR_CASE_ID",
                "MURMUR_DATASET_ID",
            ]
            .iter()
            .filter_map(|name| Some(format!("{name}={}\n", std::env::var(name).ok()?)))
            .collect();
            std::fs::write("hook-env.txt", seen).map_err(|e| e.to_string())?;
        }
        if event.kind == "task-start"
            && let Ok(traceparent) = std::env::var("TRACEPARENT")
        {
            let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").unwrap_or_default();
            let mut old = std::fs::read_to_string("hook-trace.txt").unwrap_or_default();
            old.push_str(&format!("{traceparent} {endpoint}\n"));
            std::fs::write("hook-trace.txt", old).map_err(|e| e.to_string())?;
        }
        let line = format!("{}\n", event.kind);
        let mut old = std::fs::read_to_string("hook-events.txt").unwrap_or_default();
        old.push_str(&line);
        std::fs::write("hook-events.txt", old).map_err(|e| e.to_string())?;
        match event.kind.as_str() {
            "compaction" if capsule_is(&event.payload, "hookcompact") => Ok(Some(
                r#"{"summary":"summary from the compaction hook"}"#.into(),
            )),
            "task-start" if capsule_is(&event.payload, "badhook") => {
                Err("this hook fails on purpose".into())
            }
            "task-start" if capsule_is(&event.payload, "slowhook") => loop {
                std::hint::black_box(0u64);
            },
            _ => Ok(None),
        }
    }
}

export!(Hook);
