//! What logs, traces and errors may show of a URL or a driver's failure:
//! never an endpoint's user info or query values, the model's API key, or
//! a driver config's credential-looking values.

/// A URL as logs and traces may show it: without user info, query string or
/// fragment, which may carry credentials (`?key=…`, `user:token@`).
pub fn redact_url(url: &str) -> String {
    let url = url.split('#').next().unwrap_or_default();
    let (base, query) = match url.split_once('?') {
        Some((base, _)) => (base, true),
        None => (url, false),
    };
    let base = match base.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = authority
                .rsplit_once('@')
                .map_or(authority, |(_, host)| host);
            format!("{scheme}://{host}{path}")
        }
        None => base.to_string(),
    };
    if query {
        format!("{base}?<redacted>")
    } else {
        base
    }
}

/// `text` without an endpoint's credentials (each query value, the user
/// info and its password, wherever they appear), `key`, or the string values
/// of a driver config's credential-looking fields (`authorization`,
/// `api-key`, `token`, …, at any depth): for errors that quote what they
/// failed on.
pub fn redact_secrets(
    text: &str,
    endpoint: Option<&str>,
    key: Option<&str>,
    config: Option<&str>,
) -> String {
    let mut secrets: Vec<String> = key.map(str::to_string).into_iter().collect();
    if let Some(endpoint) = endpoint {
        let url = endpoint.split('#').next().unwrap_or_default();
        if let Some((_, query)) = url.split_once('?') {
            secrets.extend(
                query
                    .split('&')
                    .filter_map(|pair| pair.split_once('=').map(|(_, v)| v.to_string())),
            );
        }
        if let Some((_, rest)) = url.split_once("://")
            && let Some((user, _)) = rest.split('/').next().and_then(|a| a.rsplit_once('@'))
        {
            secrets.push(format!("{user}@"));
            secrets.extend(
                user.split_once(':')
                    .map(|(_, password)| password.to_string()),
            );
        }
    }
    if let Some(config) = config.and_then(|c| serde_json::from_str::<serde_json::Value>(c).ok()) {
        credential_values(&config, false, &mut secrets);
    }
    // Longest first, so a secret that contains another goes whole; very short
    // values would only garble the text.
    secrets.retain(|s| s.len() >= 4);
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = text.to_string();
    for secret in secrets {
        let mask = if secret.ends_with('@') {
            ""
        } else {
            "<redacted>"
        };
        out = out.replace(&secret, mask);
    }
    out
}

/// String values under credential-looking keys of a JSON value.
fn credential_values(value: &serde_json::Value, under_secret: bool, out: &mut Vec<String>) {
    const WORDS: [&str; 7] = [
        "auth",
        "key",
        "token",
        "secret",
        "password",
        "cookie",
        "credential",
    ];
    match value {
        serde_json::Value::String(s) if under_secret => out.push(s.clone()),
        serde_json::Value::Array(items) => {
            for item in items {
                credential_values(item, under_secret, out);
            }
        }
        serde_json::Value::Object(map) => {
            for (name, item) in map {
                let lower = name.to_ascii_lowercase();
                let secret = under_secret || WORDS.iter().any(|w| lower.contains(w));
                credential_values(item, secret, out);
            }
        }
        _ => {}
    }
}
