//! Test capsule: exercises `invoke` and `manage` once per kind and writes one
//! JSON line per step to `./report.jsonl` ({"step", "ok", "value"}).

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:capsule/capsule@0.1.0",
    generate_all,
});

use murmur::artifact_manager::manage;
use murmur::tool::run::{Status, ToolInput, ToolResult};
use murmur::tool_registry::invoke::invoke;
use serde_json::{Value, json};

struct Capsule;

fn result_json(r: &ToolResult) -> Value {
    json!({
        "status": match r.status { Status::Passed => "passed", Status::Failed => "failed", Status::Error => "error" },
        "summary": r.summary,
        "data": r.data,
        "data_path": r.data_path,
        "truncated": r.truncated,
        "metadata": r.metadata.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
    })
}

fn call(name: &str, data: Option<&str>) -> Value {
    match invoke(
        name,
        &ToolInput {
            data: data.map(str::to_string),
            log_path: None,
        },
    ) {
        Ok(r) => json!({"ok": true, "value": result_json(&r)}),
        Err(e) => json!({"ok": false, "value": e}),
    }
}

fn summaries(list: &[manage::ArtifactSummary]) -> Value {
    list.iter()
        .map(|a| {
            let runtime = match a.runtime {
                manage::RuntimeType::Wasm => "wasm",
                manage::RuntimeType::Native => "native",
            };
            json!([a.name, a.version, runtime])
        })
        .collect()
}

fn outcome<T>(r: Result<T, String>, f: impl FnOnce(T) -> Value) -> Value {
    match r {
        Ok(v) => json!({"ok": true, "value": f(v)}),
        Err(e) => json!({"ok": false, "value": e}),
    }
}

impl exports::murmur::capsule::run::Guest for Capsule {
    fn run() {
        let mut lines = Vec::new();
        let mut step = |name: &str, mut v: Value| {
            v["step"] = json!(name);
            lines.push(v.to_string());
        };
        step("echo", call("echo-tool", Some("hello tools")));
        step("native", call("envdump", Some("native input")));
        step("skill", call("guide", None));
        step("local-skill", call("notes", None));
        step("shell", call("sh", Some(r#"{"command": "echo shell-ok; echo to-stderr >&2"}"#)));
        step(
            "shell-big",
            call("sh", Some(r#"{"command": "i=0; while [ $i -lt 3000 ]; do echo line-$i-xxxxxxxx; i=$((i+1)); done"}"#)),
        );
        step("undeclared", call("not-listed", None));
        step("hook-as-tool", call("stage-hook", None));
        step("tool-trap", call("echo-tool", Some("panic")));
        step("list", json!({"ok": true, "value": summaries(&manage::list())}));
        step(
            "describe",
            outcome(manage::describe("echo-tool"), |i| {
                json!({"name": i.name, "version": i.version, "description": i.description,
                       "tags": i.tags, "input_schema": i.input_schema, "output_schema": i.output_schema})
            }),
        );
        step(
            "describe-shell",
            outcome(manage::describe("sh"), |i| json!({"description": i.description, "input_schema": i.input_schema})),
        );
        step("search", outcome(manage::search("late"), |l| summaries(&l)));
        step("late-before", call("late-tool", Some("x")));
        step("pull", outcome(manage::pull("late-tool", "1.0.0"), |a| json!([a.name, a.version])));
        step("late-after", call("late-tool", Some("pulled and called")));
        step("pull-conflict", outcome(manage::pull("late-tool", "2.0.0"), |a| json!([a.name, a.version])));
        step("remove-declared", outcome(manage::remove("echo-tool"), |b| json!(b)));
        step("remove-pulled", outcome(manage::remove("late-tool"), |b| json!(b)));
        step("remove-again", outcome(manage::remove("late-tool"), |b| json!(b)));
        step("late-removed", call("late-tool", Some("x")));
        step(
            "diagnostics",
            outcome(manage::diagnostics(), |d| json!({"capsule_id": d.capsule_id, "installed": summaries(&d.installed), "capabilities": d.capabilities})),
        );
        let mut text = lines.join("\n");
        text.push('\n');
        std::fs::write("report.jsonl", text).expect("write report");
    }
}

export!(Capsule);
