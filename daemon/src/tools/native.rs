//! Native tools: a binary installed at `tools/<name>/<name>` that reads
//! `{"data", "log_path"}` JSON on stdin and answers a ToolResult JSON (or plain
//! text) on stdout.

use std::path::Path;

use super::{ProcessContext, ProcessError, ToolOutput, ToolRequest, ToolStatus, run_process};

/// A native tool may print at most this much; more marks the result truncated.
const MAX_STDOUT: usize = 1 << 20;

pub async fn run(
    binary: &Path,
    request: ToolRequest,
    ctx: &ProcessContext,
) -> Result<ToolOutput, ProcessError> {
    let name = &ctx.name;
    let input = serde_json::json!({ "data": request.data, "log_path": request.log_path });
    let finished = run_process(
        binary,
        &[],
        Some(input.to_string().into_bytes()),
        ctx,
        MAX_STDOUT,
    )
    .await
    .map_err(ProcessError::of("native", name))?;
    if let Some(why) = finished.killed {
        let detail = match why {
            "deadline exceeded" => format!("deadline exceeded after {} s", ctx.timeout.as_secs()),
            other => other.to_string(),
        };
        return Err(ProcessError::Killed {
            name: name.to_string(),
            detail,
        });
    }
    let stdout = String::from_utf8_lossy(&finished.stdout);
    let stderr = String::from_utf8_lossy(&finished.stderr);
    let success = finished.code == Some(0);
    let exit = match finished.code {
        Some(code) => format!("exit code {code}"),
        None => "a signal".to_string(),
    };
    if stdout.trim().is_empty() {
        return Ok(ToolOutput {
            status: if success {
                ToolStatus::Passed
            } else {
                ToolStatus::Error
            },
            summary: Some(format!("native tool '{name}' exited with {exit}")),
            data: (!stderr.is_empty()).then(|| stderr.into_owned()),
            data_path: None,
            truncated: finished.stderr_truncated,
            metadata: Vec::new(),
        });
    }
    let parsed = serde_json::from_str::<serde_json::Value>(stdout.trim())
        .ok()
        .filter(serde_json::Value::is_object);
    Ok(match parsed {
        Some(json) => {
            let text = |key: &str| json.get(key).and_then(|v| v.as_str()).map(str::to_string);
            let status = match json.get("status").and_then(|s| s.as_str()) {
                Some("passed") => ToolStatus::Passed,
                Some("failed") => ToolStatus::Failed,
                _ => ToolStatus::Error,
            };
            let data = text("data").or_else(|| {
                json.get("data")
                    .filter(|d| !d.is_null())
                    .map(|d| d.to_string())
            });
            let metadata = json
                .get("metadata")
                .and_then(|m| m.as_object())
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| {
                            let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                            (k.clone(), v)
                        })
                        .collect()
                })
                .unwrap_or_default();
            ToolOutput {
                status,
                summary: text("summary"),
                data,
                data_path: text("data_path"),
                truncated: finished.stdout_truncated
                    || json.get("truncated").and_then(|t| t.as_bool()) == Some(true),
                metadata,
            }
        }
        None => ToolOutput {
            status: if success {
                ToolStatus::Passed
            } else {
                ToolStatus::Error
            },
            summary: Some(format!("native tool '{name}' completed with {exit}")),
            data: Some(stdout.into_owned()),
            data_path: None,
            truncated: finished.stdout_truncated,
            metadata: Vec::new(),
        },
    })
}
