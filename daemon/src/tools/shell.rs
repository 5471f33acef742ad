//! Shell tools: binaries named in `capabilities.shell.allow`, run with input
//! `{"command": …}` (interpreters get `-c <command>`, others the split words);
//! output over the inline limit is cut, with the full text saved to a file.

use std::path::PathBuf;

use super::{ProcessContext, ProcessError, ToolOutput, ToolRequest, ToolStatus, run_process};

/// A shell tool's input that names no command to run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("shell tool input.data is required: {{\"command\": \"…\"}}")]
    NoInput,
    #[error("shell tool input must be JSON like {{\"command\": \"…\"}}: {0}")]
    NotJson(String),
    #[error("shell tool input must include a non-empty 'command' string")]
    NoCommand,
    #[error("unterminated single quote in command")]
    SingleQuote,
    #[error("unterminated double quote in command")]
    DoubleQuote,
    #[error("trailing backslash in command")]
    TrailingBackslash,
}

/// Shell interpreters take the command as one `-c` argument.
pub const INTERPRETERS: [&str; 6] = ["bash", "sh", "zsh", "dash", "ksh", "fish"];
/// Output kept per stream (for the full-output file).
const MAX_CAPTURE: usize = 8 << 20;
/// Inline result text larger than this is truncated.
pub const INLINE_LIMIT: usize = 16 * 1024;

pub async fn run(request: ToolRequest, ctx: &ProcessContext) -> Result<ToolOutput, ProcessError> {
    let command = match extract_command(request.data.as_deref()) {
        Ok(command) => command,
        Err(message) => {
            return Ok(ToolOutput {
                status: ToolStatus::Error,
                summary: Some("shell command parsing failed".into()),
                data: Some(message.to_string()),
                data_path: None,
                truncated: false,
                metadata: Vec::new(),
            });
        }
    };
    let args = if INTERPRETERS.contains(&ctx.name.as_str()) {
        vec!["-c".to_string(), command.clone()]
    } else {
        split_words(&command)?
    };
    let finished = run_process(&PathBuf::from(&ctx.name), &args, None, ctx, MAX_CAPTURE)
        .await
        .map_err(ProcessError::of("shell", &ctx.name))?;
    let code = finished
        .code
        .map_or_else(|| "killed".to_string(), |c| c.to_string());
    let mut text = format!(
        "$ {command}\nExit code: {code}\nStdout:\n{}\nStderr:\n{}",
        String::from_utf8_lossy(&finished.stdout),
        String::from_utf8_lossy(&finished.stderr)
    );
    if let Some(why) = finished.killed {
        text.push_str(&format!("\n\nThe command was killed: {why}."));
    }
    let mut metadata = vec![
        ("exit_code".to_string(), code.clone()),
        (
            "duration_ms".to_string(),
            finished.duration.as_millis().to_string(),
        ),
    ];
    let mut data_path = None;
    let truncated =
        text.len() > INLINE_LIMIT || finished.stdout_truncated || finished.stderr_truncated;
    if truncated {
        let (relative, absolute) = save_full_output(ctx, &text).await?;
        let mut cut = INLINE_LIMIT.min(text.len());
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str(&format!(
            "\n\nOutput truncated. Full output written to {relative}"
        ));
        metadata.push(("full_output_path".into(), absolute));
        data_path = Some(relative);
    }
    let status = match (finished.killed, finished.code) {
        (None, Some(0)) => ToolStatus::Passed,
        (None, _) => ToolStatus::Failed,
        (Some(_), _) => ToolStatus::Error,
    };
    Ok(ToolOutput {
        status,
        summary: Some(format!("Shell command exited with code {code}")),
        data: Some(text),
        data_path,
        truncated,
        metadata,
    })
}

/// Writes the full output under `<bookkeeping>/tool-output/`; returns the path
/// as the capsule sees it (relative to its workdir) and the host path.
async fn save_full_output(
    ctx: &ProcessContext,
    text: &str,
) -> Result<(String, String), ProcessError> {
    let file = ctx.bookkeeping.join("tool-output").join(format!(
        "{}-{}.txt",
        ctx.name,
        uuid::Uuid::now_v7().simple()
    ));
    let (root, path, bytes) = (ctx.workdir.clone(), file.clone(), text.as_bytes().to_vec());
    let max_bytes = ctx.tool_output_max_bytes;
    // The tool may have replaced tool-output/ with a link: not followed.
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        crate::fsx::create_new(&root, &path, 0o644)?.write_all(&bytes)?;
        if max_bytes > 0
            && let Some(dir) = path.parent()
            && let Err(error) = crate::fsx::trim_dir(&root, dir, max_bytes)
        {
            tracing::warn!(dir = %dir.display(), %error, "cannot trim tool-output/");
        }
        Ok(())
    })
    .await
    .unwrap_or_else(|e| Err(std::io::Error::other(e)))
    .map_err(|source| ProcessError::SaveOutput {
        path: file.clone(),
        source,
    })?;
    let relative = file
        .strip_prefix(&ctx.workdir)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| file.display().to_string());
    Ok((relative, file.display().to_string()))
}

fn extract_command(data: Option<&str>) -> Result<String, CommandError> {
    let data = data.ok_or(CommandError::NoInput)?;
    let json: serde_json::Value =
        serde_json::from_str(data).map_err(|e| CommandError::NotJson(e.to_string()))?;
    json.get("command")
        .and_then(serde_json::Value::as_str)
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .ok_or(CommandError::NoCommand)
}

/// Splits a command line into words with single quotes, double quotes and
/// backslash escapes (no expansion of any kind).
pub fn split_words(line: &str) -> Result<Vec<String>, CommandError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(CommandError::SingleQuote),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c) => word.push(c),
                            None => return Err(CommandError::TrailingBackslash),
                        },
                        Some(c) => word.push(c),
                        None => return Err(CommandError::DoubleQuote),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err(CommandError::TrailingBackslash),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_respect_quotes() {
        assert_eq!(
            split_words(r#"log --format='%h %s' "a b" c\ d"#).expect("split"),
            ["log", "--format=%h %s", "a b", "c d"]
        );
        assert!(split_words("echo 'open").is_err());
    }

    #[test]
    fn command_must_be_given() {
        assert!(extract_command(None).is_err());
        assert!(extract_command(Some("{}")).is_err());
        assert_eq!(
            extract_command(Some(r#"{"command":" ls "}"#)).expect("ok"),
            "ls"
        );
    }
}
