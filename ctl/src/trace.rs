//! Human rendering of an agent session's `trace.jsonl` for `roostctl trace`.

use std::io::Write;

use serde_json::Value;

/// Writes one readable line per trace event; lines that are not JSON objects
/// are shown as they are.
pub fn render(out: &mut impl Write, jsonl: &[u8]) -> std::io::Result<()> {
    let text = String::from_utf8_lossy(jsonl);
    let mut shown = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        shown += 1;
        let Ok(Value::Object(event)) = serde_json::from_str::<Value>(line) else {
            writeln!(out, "{line}")?;
            continue;
        };
        let get = |k: &str| event.get(k).cloned().unwrap_or(Value::Null);
        let s = |k: &str| match get(k) {
            Value::String(s) => s,
            Value::Null => "-".into(),
            other => other.to_string(),
        };
        // "2026-11-30T17:01:02.345Z" → "17:01:02.345"
        let ts = s("ts");
        let time = ts.get(11..23).unwrap_or(&ts).to_string();
        let detail = match s("event").as_str() {
            "session_start" => format!(
                "session start  {} {}  model {} via {}  tools {}",
                s("capsule"),
                s("version"),
                s("model"),
                s("driver"),
                list(&get("tools"))
            ),
            "task_start" => format!(
                "task start     {}  from {} ({} bytes)  context {}",
                s("task_id"),
                s("source"),
                s("input_bytes"),
                s("context_id")
            ),
            "inference" if event.contains_key("error") => format!(
                "  inference    turn {}  {}  FAILED after {} ms: {}",
                s("turn"),
                s("model"),
                s("latency_ms"),
                s("error")
            ),
            "inference" => format!(
                "  inference    turn {}  {}{}  {} in / {} out tokens  {} ms  {}{}",
                s("turn"),
                s("model"),
                if s("purpose") == "compaction" {
                    " (compaction)"
                } else {
                    ""
                },
                s("input_tokens"),
                s("output_tokens"),
                s("latency_ms"),
                s("stop_reason"),
                if get("continuation") == Value::Bool(true) {
                    "  (continued)"
                } else {
                    ""
                }
            ),
            "tool_call" => {
                let mut d = format!(
                    "  tool         {}  {}  {} ms",
                    s("name"),
                    s("status"),
                    s("duration_ms")
                );
                if let Value::String(rule) = get("rule") {
                    d.push_str(&format!("  denied by {rule}"));
                }
                if let Value::String(output) = get("output") {
                    d.push_str(&format!("\n               output: {}", excerpt(&output)));
                }
                d
            }
            "compaction" => format!(
                "  compaction   at {} tokens by {}: {} → {} messages",
                s("context_tokens"),
                s("source"),
                s("messages_before"),
                s("messages_after")
            ),
            "hook_error" => format!(
                "  hook         {} on {} failed: {}",
                s("hook"),
                s("kind"),
                s("error")
            ),
            "task_end" => {
                let mut d = format!(
                    "task end       {}  {}  {} turns, {} in / {} out tokens",
                    s("task_id"),
                    s("exit_status"),
                    s("turns"),
                    s("input_tokens"),
                    s("output_tokens")
                );
                if let Value::String(e) = get("error") {
                    d.push_str(&format!("\n               error: {e}"));
                }
                if let Value::String(a) = get("answer") {
                    d.push_str(&format!("\n               answer: {}", excerpt(&a)));
                }
                d
            }
            "session_end" => format!(
                "session end    {}  {} turns, {} in / {} out tokens{}",
                s("exit_status"),
                s("total_turns"),
                s("input_tokens"),
                s("output_tokens"),
                match get("error") {
                    Value::String(e) => format!("\n               error: {e}"),
                    _ => String::new(),
                }
            ),
            "checkpoint_rejected" => format!(
                "checkpoint     {} rejected ({}), renamed *.rejected",
                s("path"),
                s("reason")
            ),
            "denied" => format!(
                "  denied   {} {} (by {}) by {}",
                s("kind"),
                s("target"),
                s("by"),
                s("rule")
            ),
            "checkpoints_signed" => format!("checkpoints    {} signed", s("files")),
            other => {
                let mut rest = event.clone();
                for k in ["ts", "event", "session_id"] {
                    rest.remove(k);
                }
                format!("{other:<14} {}", Value::Object(rest))
            }
        };
        writeln!(out, "{time}  {detail}")?;
    }
    if shown == 0 {
        writeln!(
            out,
            "no trace yet (traces are written by agent capsules, at each task end)"
        )?;
    }
    Ok(())
}

fn list(value: &Value) -> String {
    match value {
        Value::Array(items) if items.is_empty() => "-".into(),
        Value::Array(items) => items
            .iter()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join(", "),
        _ => "-".into(),
    }
}

/// First line, at most 200 characters.
fn excerpt(text: &str) -> String {
    let first = text.lines().next().unwrap_or("");
    let mut out: String = first.chars().take(200).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_render_one_readable_line_each() {
        let jsonl = br#"{"ts":"2026-11-30T17:01:02.345Z","event":"task_start","session_id":"s","task_id":"tsk_1","context_id":"ctx_1","source":"task_md","input_bytes":12}
{"ts":"2026-11-30T17:01:02.400Z","event":"tool_call","session_id":"s","name":"rm","status":"denied","rule":"tools (allow-list)","duration_ms":0}
not json
"#;
        let mut out = Vec::new();
        render(&mut out, jsonl).expect("render");
        let text = String::from_utf8(out).expect("utf8");
        assert!(
            text.contains("17:01:02.345  task start     tsk_1  from task_md (12 bytes)"),
            "{text}"
        );
        assert!(
            text.contains("rm  denied  0 ms  denied by tools (allow-list)"),
            "{text}"
        );
        assert!(text.contains("not json"));
        let mut out = Vec::new();
        render(&mut out, b"").expect("render");
        assert!(
            String::from_utf8(out)
                .expect("utf8")
                .contains("no trace yet")
        );
    }
}
