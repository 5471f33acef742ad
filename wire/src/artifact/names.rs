//! Name and version rules shared by capsules and artifacts (they appear in URLs,
//! file names and registry paths, so they are strict).

/// Lowercase letters, digits and '-', starting with a letter or digit, 1 to 63 characters.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 63 {
        return Err(format!(
            "must be 1 to 63 characters, got {} ('{name}')",
            name.len()
        ));
    }
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ok_start = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !ok_chars || !ok_start {
        return Err(format!(
            "'{name}' may contain only lowercase letters, digits and '-', and must start with a letter or digit"
        ));
    }
    Ok(())
}

/// `MAJOR.MINOR.PATCH` with optional `-pre` and `+build`, numbers without leading zeros.
pub fn validate_semver(version: &str) -> Result<(), String> {
    let bad = || format!("'{version}' is not a semantic version such as 1.2.3");
    let core = version.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() != 3 {
        return Err(bad());
    }
    for part in parts {
        if part.is_empty()
            || !part.bytes().all(|b| b.is_ascii_digit())
            || (part.len() > 1 && part.starts_with('0'))
        {
            return Err(bad());
        }
    }
    let rest = &version[core.len()..];
    if rest == "-" || rest == "+" || rest.ends_with('.') {
        return Err(bad());
    }
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+');
    if !rest.bytes().all(allowed) {
        return Err(bad());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semver_accepts_prerelease_and_build() {
        for ok in ["0.1.0", "1.2.3-alpha.1", "1.2.3+build.5", "10.20.30-rc.1+x"] {
            assert!(validate_semver(ok).is_ok(), "{ok}");
        }
        for bad in ["1", "1.2", "1.2.3-", "a.b.c", "1.2.3.4", "1.2.3-é"] {
            assert!(validate_semver(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_are_url_and_path_safe() {
        for ok in ["echo-tool", "a", "x1"] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Echo", "-x", "a/b", "..", "a b"] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }
}
