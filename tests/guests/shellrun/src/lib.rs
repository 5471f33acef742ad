//! Test capsule: invokes the shell tool named in `./shell-tool.txt` with the
//! command in `./shell-command.txt` and writes the outcome to
//! `./shell-result.json` (`{"ok", "status", "data"}` or `{"ok": false, "error"}`),
//! then prints a line to stdout and one to stderr; optionally runs a second
//! call (`./shell-command-2.txt`, its outcome in `./shell-result-2.json`),
//! pulls an artifact (`./shell-pull.txt`) and fails on purpose
//! (`./shell-then-panic.txt`).

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:capsule/capsule@0.1.0",
    generate_all,
});

use murmur::artifact_manager::manage;
use murmur::tool::run::{Status, ToolInput};
use murmur::tool_registry::invoke::invoke;
use serde_json::json;

struct Capsule;

impl exports::murmur::capsule::run::Guest for Capsule {
    fn run() {
        let tool = std::fs::read_to_string("shell-tool.txt").expect("shell-tool.txt");
        let command = std::fs::read_to_string("shell-command.txt").expect("shell-command.txt");
        let call = |command: &str| {
            let input = ToolInput {
                data: Some(json!({ "command": command }).to_string()),
                log_path: None,
            };
            match invoke(tool.trim(), &input) {
                Ok(r) => json!({
                    "ok": true,
                    "status": match r.status { Status::Passed => "passed", Status::Failed => "failed", Status::Error => "error" },
                    "data": r.data,
                }),
                Err(e) => json!({ "ok": false, "error": e }),
            }
        };
        std::fs::write("shell-result.json", call(&command).to_string()).expect("write result");
        if let Ok(second) = std::fs::read_to_string("shell-command-2.txt") {
            std::fs::write("shell-result-2.json", call(&second).to_string()).expect("write");
        }
        // Output after the tool ran: roostd writes it to the session's log,
        // which the tool may have tampered with.
        println!("shellrun: {} returned", tool.trim());
        eprintln!("shellrun: stderr after the tool");
        // Optionally a pull (`name version` in ./shell-pull.txt), its outcome
        // in ./shell-pull-result.json; then a failure on purpose when
        // ./shell-then-panic.txt exists (for restarts).
        if let Ok(spec) = std::fs::read_to_string("shell-pull.txt") {
            let mut words = spec.split_whitespace();
            let (name, version) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let outcome = match manage::pull(name, version) {
                Ok(a) => json!({ "ok": true, "name": a.name }),
                Err(e) => json!({ "ok": false, "error": e }),
            };
            std::fs::write("shell-pull-result.json", outcome.to_string()).expect("write pull");
        }
        if std::path::Path::new("shell-then-panic.txt").exists() {
            panic!("shellrun: failing on purpose after the tool");
        }
    }
}

export!(Capsule);
