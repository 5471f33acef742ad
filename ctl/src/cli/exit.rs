//! roostctl's exit codes, and which one an error gets.

/// The command did what was asked.
pub const OK: u8 = 0;
/// Any other error (the daemon failed the request, roostctl could not read
/// its answer or write its output); `doctor`: a check failed.
pub const ERROR: u8 = 1;
/// Usage: bad arguments, or an input to fix (a manifest, a path, a task file).
pub const USAGE: u8 = 2;
/// The session or task ended but did not succeed (failed, stopped,
/// interrupted; a task failed, was canceled or rejected).
pub const UNSUCCESSFUL: u8 = 3;
/// No such session, route or task.
pub const NOT_FOUND: u8 = 4;
/// The daemon cannot be reached, or refused access (socket permissions, token).
pub const UNREACHABLE: u8 = 5;
/// The capsule's policy was refused (the host cannot enforce it, or it asks
/// for more than the daemon allows).
pub const POLICY: u8 = 6;
/// `--timeout` ran out first; the session or task goes on.
pub const TIMEOUT: u8 = 7;

/// The exit code for an error from roostd or its gateway.
pub fn of_client_error(e: &crate::client::ClientError) -> u8 {
    use crate::client::ClientError as E;
    match e {
        E::NoDaemon { .. } | E::PermissionDenied { .. } | E::Connect { .. } | E::Gateway { .. } => {
            UNREACHABLE
        }
        E::Api { status, code, .. } => match (*status, code.as_str()) {
            (_, "unenforceable_policy" | "limit_too_high") => POLICY,
            (401 | 403, _) => UNREACHABLE,
            // A2A: TaskNotFound.
            (404, _) | (_, "not_found" | "-32001") => NOT_FOUND,
            (400 | 413 | 422, _) => USAGE,
            // A2A: invalid params.
            (_, "-32602") => USAGE,
            _ => ERROR,
        },
        E::Http(_) | E::Decode(_) => ERROR,
    }
}

/// The exit code for a session's end state (`start --wait`).
pub fn of_session(state: crate::api::SessionState) -> u8 {
    if state == crate::api::SessionState::Completed {
        OK
    } else {
        UNSUCCESSFUL
    }
}

/// The exit code for the state a task was left in (`send`, `cancel`): a
/// task that failed, was canceled or rejected did not succeed; one that
/// waits for input or is still working is not a failure.
pub fn of_task(state: Option<&str>) -> u8 {
    match state {
        Some("failed" | "canceled" | "rejected") => UNSUCCESSFUL,
        _ => OK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClientError;

    fn api(status: u16, code: &str) -> ClientError {
        ClientError::Api {
            status,
            code: code.into(),
            message: String::new(),
        }
    }

    #[test]
    fn each_kind_of_failure_has_its_own_code() {
        let socket = std::path::PathBuf::from("/run/roost/roostd.sock");
        assert_eq!(
            of_client_error(&ClientError::NoDaemon {
                socket: socket.clone()
            }),
            UNREACHABLE
        );
        assert_eq!(
            of_client_error(&ClientError::PermissionDenied { socket }),
            UNREACHABLE
        );
        assert_eq!(of_client_error(&api(401, "unauthorized")), UNREACHABLE);
        assert_eq!(of_client_error(&api(404, "not_found")), NOT_FOUND);
        assert_eq!(of_client_error(&api(200, "-32001")), NOT_FOUND);
        assert_eq!(of_client_error(&api(422, "invalid_manifest")), USAGE);
        assert_eq!(of_client_error(&api(422, "unenforceable_policy")), POLICY);
        assert_eq!(of_client_error(&api(500, "internal")), ERROR);
        assert_eq!(of_task(Some("failed")), UNSUCCESSFUL);
        assert_eq!(of_task(Some("input-required")), OK);
        assert_eq!(of_session(crate::api::SessionState::Stopped), UNSUCCESSFUL);
        let codes = [
            OK,
            ERROR,
            USAGE,
            UNSUCCESSFUL,
            NOT_FOUND,
            UNREACHABLE,
            POLICY,
            TIMEOUT,
        ];
        let mut unique = codes.to_vec();
        unique.dedup();
        assert_eq!(unique.len(), codes.len());
    }
}
