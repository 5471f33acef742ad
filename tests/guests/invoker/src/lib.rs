//! Test capsule: invokes `echo-tool` N times (N from `./invoke-count.txt`,
//! default 1) and writes each call's duration in nanoseconds to
//! `./invoke-timings.txt`; any failed call makes the capsule trap.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:capsule/capsule@0.1.0",
    generate_all,
});

use murmur::tool::run::ToolInput;
use murmur::tool_registry::invoke::invoke;

struct Capsule;

impl exports::murmur::capsule::run::Guest for Capsule {
    fn run() {
        let count: usize = std::fs::read_to_string("invoke-count.txt")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1);
        let mut out = String::new();
        for _ in 0..count {
            let started = std::time::Instant::now();
            let result = invoke(
                "echo-tool",
                &ToolInput {
                    data: Some("ping".into()),
                    log_path: None,
                },
            );
            let nanos = started.elapsed().as_nanos();
            match result {
                Ok(r) if r.data.as_deref() == Some("ping") => {}
                other => panic!("echo-tool call failed: {other:?}"),
            }
            out.push_str(&format!("{nanos}\n"));
        }
        std::fs::write("invoke-timings.txt", out).expect("write timings");
    }
}

export!(Capsule);
