//! Test capsule: GETs each URL in `PROBE_URLS` via wasi:http, writes results to `./net.json`.

use serde_json::{Map, Value};
use wasi::http::outgoing_handler;
use wasi::http::types::{Fields, Method, OutgoingRequest, RequestOptions, Scheme};

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:capsule/capsule@0.1.0",
    generate_all,
});

struct Capsule;

const SECOND_NS: u64 = 1_000_000_000;

/// Splits `scheme://authority/path?query` into its request parts.
fn split_url(url: &str) -> Result<(Scheme, &str, String), String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("not an absolute URL: {url}"))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_string()),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let tail = tail.split('#').next().unwrap_or("");
    let path = if tail.starts_with('/') {
        tail.to_string()
    } else {
        format!("/{tail}")
    };
    Ok((scheme, authority, path))
}

/// One GET; `status:<code>` or `error:<why>`.
fn probe(url: &str) -> String {
    let (scheme, authority, path) = match split_url(url) {
        Ok(parts) => parts,
        Err(e) => return format!("error:{e}"),
    };
    let request = OutgoingRequest::new(Fields::new());
    if request.set_method(&Method::Get).is_err()
        || request.set_scheme(Some(&scheme)).is_err()
        || request.set_authority(Some(authority)).is_err()
        || request.set_path_with_query(Some(&path)).is_err()
    {
        return format!("error:invalid request parts for {url}");
    }
    let options = RequestOptions::new();
    // Best effort: a host may not support timeouts.
    let _ = options.set_connect_timeout(Some(10 * SECOND_NS));
    let _ = options.set_first_byte_timeout(Some(20 * SECOND_NS));
    // The body is never taken, so the host sends an empty one.
    let future = match outgoing_handler::handle(request, Some(options)) {
        Ok(f) => f,
        Err(e) => return format!("error:{e:?}"),
    };
    {
        let pollable = future.subscribe();
        pollable.block();
    }
    match future.get() {
        Some(Ok(Ok(response))) => format!("status:{}", response.status()),
        Some(Ok(Err(e))) => format!("error:{e:?}"),
        Some(Err(())) => "error:response already taken".to_string(),
        None => "error:response not ready".to_string(),
    }
}

impl exports::murmur::capsule::run::Guest for Capsule {
    fn run() {
        let urls = std::env::var("PROBE_URLS").unwrap_or_default();
        let mut results = Map::new();
        for url in urls.split(',').map(str::trim).filter(|u| !u.is_empty()) {
            let outcome = probe(url);
            println!("{url} -> {outcome}");
            results.insert(url.to_string(), Value::from(outcome));
        }
        let text = serde_json::to_string_pretty(&Value::Object(results)).expect("serialise");
        std::fs::write("net.json", text).expect("write ./net.json");
    }
}

export!(Capsule);
