//! `roostctl start`: its progress line on a terminal (the staging steps
//! roostd reports: fetch, verify, compile), and a capsule roostd cannot
//! read (under systemd it sees neither `/home` nor another user's files):
//! roostctl packs the directory ([`crate::artifact::tree`]), uploads it over
//! the socket, and starts roostd's copy.

use super::*;

/// One start, with a progress line on stderr when `progress`.
async fn once(
    client: &Client,
    request: &StartRequest,
    progress: bool,
) -> Result<Session, ClientError> {
    if !progress {
        return client.start(request).await;
    }
    let mut err = std::io::stderr();
    let outcome = client
        .start_with_progress(request, |step, what| {
            let _ = write!(err, "\r\x1b[2K{}", progress_line(step, what));
            let _ = err.flush();
        })
        .await;
    let _ = write!(err, "\r\x1b[2K");
    let _ = err.flush();
    outcome
}

/// The line a step shows: `compile  openai-driver@0.1.0`, cut to 100 columns.
fn progress_line(step: &str, what: &str) -> String {
    let line = format!("{step:<8} {what}");
    match line.char_indices().nth(100) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}

/// Starts `request` (showing its progress when `progress`); when roostd
/// answers that it cannot read the capsule and roostctl can, uploads the
/// capsule and starts the uploaded copy.
pub(super) async fn start(
    client: &Client,
    request: &StartRequest,
    progress: bool,
) -> Result<Session, CliError> {
    let refused = match once(client, request, progress).await {
        Ok(session) => return Ok(session),
        Err(e) if e.api_code() == Some("capsule_unreadable") => e,
        Err(e) => return Err(e.into()),
    };
    let given = std::path::Path::new(&request.path);
    let dir = if given.is_dir() {
        given.to_path_buf()
    } else if given.file_name() == Some(crate::artifact::tree::CAPSULE_MANIFEST.as_ref()) {
        given.parent().unwrap_or(given).to_path_buf()
    } else {
        return Err(refused.into());
    };
    if !dir.join(crate::artifact::tree::CAPSULE_MANIFEST).is_file() {
        // Not readable here either: roostd's answer stands.
        return Err(refused.into());
    }
    let zip = crate::artifact::tree::pack_tree(&dir, crate::artifact::DEFAULT_MAX_BUNDLE_BYTES)?;
    let uploaded = client.upload(zip).await?;
    eprintln!(
        "roostctl: roostd cannot read {}; uploaded it ({} files, {} bytes) and starts {}",
        dir.display(),
        uploaded.files,
        uploaded.bytes,
        uploaded.path
    );
    let copy = StartRequest {
        path: uploaded.path,
        ..request.clone()
    };
    Ok(once(client, &copy, progress).await?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_progress_line_names_the_step_and_stays_on_one_line() {
        assert_eq!(
            super::progress_line("fetch", "openai-driver@0.1.0"),
            "fetch    openai-driver@0.1.0"
        );
        let long = super::progress_line("compile", &"x".repeat(300));
        assert_eq!(long.chars().count(), 101);
        assert!(long.ends_with('…'));
    }
}
