//! Agent cards: the public card of a route (1.0's, 0.3's for a client that
//! asks for it, or both merged: `a2a.card_compat`) and the authenticated
//! extended one,
//! built from what routing says of the route ([`Agent`]: its session and its
//! manifest's `a2a:` section), at the URL the gateway is reached by.

use std::net::SocketAddr;

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Gateway;
use super::routing::Agent;
use super::wire::Dialect;
use crate::manifest::a2a::{CardCompat, Skill};

/// Where cards say the gateway is: `a2a.public_url`, else the listen
/// address; with a wildcard listen address (`0.0.0.0`, `::`), the host the
/// client asked for (`Host`), which no configured URL overrides.
#[derive(Debug, Clone)]
pub struct PublicBase {
    configured: Option<String>,
    listen: SocketAddr,
    /// `http` or `https` (the gateway serves TLS itself, `a2a.tls`).
    scheme: &'static str,
}

impl PublicBase {
    pub fn new(public_url: Option<&str>, listen: SocketAddr, tls: bool) -> Self {
        Self {
            configured: public_url.map(|u| u.trim_end_matches('/').to_string()),
            listen,
            scheme: if tls { "https" } else { "http" },
        }
    }

    /// The host `a2a.public_url` names (without its port), if it is set:
    /// a loopback listener behind a proxy answers to it too.
    pub fn configured_host(&self) -> Option<String> {
        let url = self.configured.as_deref()?;
        let authority = url.split_once("://")?.1.split('/').next()?;
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next()?,
            None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
        };
        Some(host.to_string())
    }

    /// The base URL for a request that named `host`, and whether it came
    /// from the request (so the answer varies with `Host`).
    fn resolve(&self, headers: &HeaderMap) -> (String, bool) {
        if let Some(url) = &self.configured {
            return (url.clone(), false);
        }
        if !self.listen.ip().is_unspecified() {
            return (format!("{}://{}", self.scheme, self.listen), false);
        }
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .filter(|h| {
                !h.is_empty()
                    && h.len() <= 255
                    && h.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
            });
        match host {
            Some(h) => (format!("{}://{h}", self.scheme), true),
            None => {
                let loopback = match self.listen {
                    SocketAddr::V4(a) => format!("127.0.0.1:{}", a.port()),
                    SocketAddr::V6(a) => format!("[::1]:{}", a.port()),
                };
                (format!("{}://{loopback}", self.scheme), true)
            }
        }
    }
}

/// Which card a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CardShape {
    /// The version its `A2A-Version` names (or 0.3's at 0.3's path).
    Named(Dialect),
    /// No version named: 1.0's, or with `card_compat: merged` 1.0's with
    /// 0.3's members beside it.
    Unnamed,
}

/// Adds to `into` every member of `from` it lacks, object by object (the
/// two cards' `capabilities` and each security scheme become one object
/// both versions read; where both have a member, `into`'s stays).
fn merge(into: &mut Value, from: Value) {
    // Lists and scalars: `into`'s.
    if let (Value::Object(into), Value::Object(from)) = (into, from) {
        for (k, v) in from {
            match into.get_mut(&k) {
                Some(mine) => merge(mine, v),
                None => {
                    into.insert(k, v);
                }
            }
        }
    }
}

/// `GET .well-known/agent-card.json`: the card with caching headers (it
/// changes only when the session does).
pub(super) fn public(gw: &Gateway, agent: &Agent, headers: &HeaderMap, d: CardShape) -> Response {
    let (base, by_host) = gw.base.resolve(headers);
    let mut card = match d {
        CardShape::Named(d) => card(gw, agent, &base, false, d),
        CardShape::Unnamed => match agent.spec.card_compat.unwrap_or(gw.card_compat) {
            CardCompat::Exact => card(gw, agent, &base, false, Dialect::V10),
            CardCompat::Merged => {
                let mut merged = card(gw, agent, &base, false, Dialect::V10);
                merge(&mut merged, card(gw, agent, &base, false, Dialect::V03));
                merged
            }
        },
    };
    // The tag is of the card before it is signed: a signature differs
    // every time (ECDSA), the card does not.
    use sha2::Digest;
    let etag = format!(
        "\"{}\"",
        hex::encode(&sha2::Sha256::digest(card.to_string().as_bytes())[..12])
    );
    sign(gw, &mut card, &base);
    let body = card.to_string();
    let modified = agent
        .since
        .parse::<humantime::Timestamp>()
        .map(|t| httpdate(std::time::SystemTime::from(t)))
        .unwrap_or_default();
    let mut response = (
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (header::CACHE_CONTROL, "public, max-age=60".to_string()),
            (header::ETAG, etag),
        ],
        body,
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&modified) {
        response.headers_mut().insert(header::LAST_MODIFIED, v);
    }
    // The card differs by the version asked for, and by host when the
    // URL comes from it.
    let vary = if by_host {
        "A2A-Version, Host"
    } else {
        "A2A-Version"
    };
    response
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static(vary));
    response
}

/// The authenticated extended card (`GetExtendedAgentCard`), or `None`
/// when the manifest lists no `extended_skills`.
pub(super) fn extended(
    gw: &Gateway,
    agent: &Agent,
    headers: &HeaderMap,
    d: Dialect,
) -> Option<Value> {
    if agent.spec.extended_skills.is_empty() {
        return None;
    }
    let (base, _) = gw.base.resolve(headers);
    let mut card = card(gw, agent, &base, true, d);
    sign(gw, &mut card, &base);
    Some(card)
}

fn sign(gw: &Gateway, card: &mut Value, base: &str) {
    if let Some(signer) = &gw.signer {
        signer.sign(card, &format!("{base}{}", super::signing::JWKS_PATH));
    }
}

/// `GET /.well-known/jwks.json`: the keys cards are signed with.
pub(super) async fn jwks(axum::extract::State(gw): axum::extract::State<Gateway>) -> Response {
    match &gw.signer {
        Some(signer) => (
            [(header::CACHE_CONTROL, "public, max-age=300")],
            axum::Json(signer.jwks().clone()),
        )
            .into_response(),
        None => super::problem(
            axum::http::StatusCode::NOT_FOUND,
            "not_found",
            "cards are not signed here (a2a.sign_cards: false)",
        ),
    }
}

fn skill_json(s: &Skill) -> Value {
    let mut v = json!({
        "id": s.id, "name": s.name, "description": s.description, "tags": s.tags,
    });
    for (key, list) in [
        ("examples", &s.examples),
        ("inputModes", &s.input_modes),
        ("outputModes", &s.output_modes),
    ] {
        if !list.is_empty() {
            v[key] = json!(list);
        }
    }
    v
}

fn modes(list: &[String]) -> Value {
    if list.is_empty() {
        json!(["text/plain"])
    } else {
        json!(list)
    }
}

/// A card: A2A 1.0's, exactly (its schema admits no other member), or
/// 0.3's (`url`, `preferredTransport`, `additionalInterfaces`, 0.3
/// security schemes) for a client that asks for 0.3.
fn card(gw: &Gateway, agent: &Agent, base: &str, extended: bool, d: Dialect) -> Value {
    let spec = &agent.spec;
    let url = format!("{base}/a2a/{}", agent.route);
    let about = spec.description.clone().unwrap_or_else(|| {
        format!(
            "{} {}: an agent capsule hosted by roostd",
            agent.capsule, agent.version
        )
    });
    let mut skills: Vec<Value> = spec.skills.iter().map(skill_json).collect();
    if extended {
        skills.extend(spec.extended_skills.iter().map(skill_json));
    }
    if skills.is_empty() {
        // A capsule that names no skills still does one thing: answer tasks.
        skills.push(json!({
            "id": agent.capsule, "name": agent.capsule,
            "description": about, "tags": ["a2a"],
        }));
    }
    let mut description = about;
    if agent.ended {
        // Gone, not never here: its tasks stay readable.
        description.truncate(description.trim_end().trim_end_matches('.').len());
        description.push_str(
            ". Unavailable: its session has ended, so it takes no new tasks; GetTask and \
             ListTasks still answer for the tasks it was sent",
        );
    }
    let has_extended = !spec.extended_skills.is_empty();
    let mut card = json!({
        "name": agent.route,
        "description": description,
        "version": agent.version,
        "defaultInputModes": modes(&spec.input_modes),
        "defaultOutputModes": modes(&spec.output_modes),
        "skills": skills,
    });
    let security = gw.access.scheme_description(&agent.route);
    // 0.3's gRPC has no tenant: it serves the default route only.
    let grpc_v03 = gw.grpc && gw.grpc_default.as_deref() == Some(agent.route.as_str());
    match d {
        Dialect::V10 => {
            let mut interfaces = vec![
                json!({"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}),
                json!({"url": url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}),
            ];
            if gw.grpc {
                // gRPC has no path: the host and port, and the route as
                // the tenant every request carries.
                interfaces.push(json!({
                    "url": grpc_target(base), "protocolBinding": "GRPC",
                    "protocolVersion": "1.0", "tenant": agent.route,
                }));
            }
            for binding in ["JSONRPC", "HTTP+JSON"] {
                interfaces.push(
                    json!({"url": url, "protocolBinding": binding, "protocolVersion": "0.3"}),
                );
            }
            if grpc_v03 {
                interfaces.push(json!({
                    "url": grpc_target(base), "protocolBinding": "GRPC", "protocolVersion": "0.3",
                }));
            }
            card["supportedInterfaces"] = json!(interfaces);
            card["capabilities"] = json!({
                "streaming": true,
                "pushNotifications": gw.push.is_some(),
                "extendedAgentCard": has_extended,
            });
            if let Some(what) = security {
                card["securitySchemes"] = json!({
                    "bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer", "description": what}}
                });
                card["securityRequirements"] = json!([{"schemes": {"bearer": {"list": []}}}]);
                // The same token as an API key, where a2a.api_key_header says.
                if let Some(header) = &gw.api_key_header {
                    card["securitySchemes"]["apiKey"] = json!({"apiKeySecurityScheme":
                        {"location": "header", "name": header.as_str(), "description": what}});
                    card["securityRequirements"] = json!([
                        {"schemes": {"bearer": {"list": []}}},
                        {"schemes": {"apiKey": {"list": []}}},
                    ]);
                }
            }
        }
        Dialect::V03 => {
            card["protocolVersion"] = json!("0.3.0");
            card["url"] = json!(url);
            card["preferredTransport"] = json!("JSONRPC");
            let mut interfaces = vec![
                json!({"url": url, "transport": "JSONRPC"}),
                json!({"url": url, "transport": "HTTP+JSON"}),
            ];
            if grpc_v03 {
                interfaces.push(json!({"url": grpc_target(base), "transport": "GRPC"}));
            }
            card["additionalInterfaces"] = json!(interfaces);
            card["capabilities"] = json!({
                "streaming": true,
                "pushNotifications": gw.push.is_some(),
            });
            card["supportsAuthenticatedExtendedCard"] = json!(has_extended);
            if let Some(what) = security {
                card["securitySchemes"] = json!({
                    "bearer": {"type": "http", "scheme": "bearer", "description": what}
                });
                card["security"] = json!([{"bearer": []}]);
                if let Some(header) = &gw.api_key_header {
                    card["securitySchemes"]["apiKey"] = json!({"type": "apiKey", "in": "header",
                        "name": header.as_str(), "description": what});
                    card["security"] = json!([{"bearer": []}, {"apiKey": []}]);
                }
            }
        }
    }
    if let Some(p) = &spec.provider {
        card["provider"] = json!({"organization": p.organization, "url": p.url});
    }
    if let Some(u) = &spec.documentation_url {
        card["documentationUrl"] = json!(u);
    }
    if let Some(u) = &spec.icon_url {
        card["iconUrl"] = json!(u);
    }
    card
}

/// A gRPC target for a base URL: its host and port (the scheme's default
/// port when it names none); a path cannot be had over gRPC.
fn grpc_target(base: &str) -> String {
    let (tls, rest) = match base.split_once("://") {
        Some((scheme, rest)) => (scheme.eq_ignore_ascii_case("https"), rest),
        None => (false, base),
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    // A port is a colon after the host (after the `]` of an IPv6 literal).
    let after_host = authority.rsplit(']').next().unwrap_or(authority);
    if after_host.contains(':') {
        authority.to_string()
    } else {
        format!("{authority}:{}", if tls { 443 } else { 80 })
    }
}

/// An HTTP date (RFC 9110 IMF-fixdate).
fn httpdate(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(host: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(host).expect("host"));
        h
    }

    #[test]
    fn the_card_url_is_the_configured_one_else_the_listen_address_else_the_host_asked_for() {
        let wildcard: SocketAddr = "0.0.0.0:7420".parse().expect("addr");
        let configured = PublicBase::new(Some("https://agents.example/"), wildcard, false);
        assert_eq!(
            configured.resolve(&headers("evil.example")),
            ("https://agents.example".to_string(), false)
        );
        let bound = PublicBase::new(None, "127.0.0.1:7420".parse().expect("addr"), false);
        assert_eq!(
            bound.resolve(&headers("x")),
            ("http://127.0.0.1:7420".to_string(), false)
        );
        let any = PublicBase::new(None, wildcard, false);
        assert_eq!(
            any.resolve(&headers("host.lan:7420")),
            ("http://host.lan:7420".to_string(), true)
        );
        // A Host that is not a host name falls back to loopback.
        assert_eq!(
            any.resolve(&headers("a/b@c")).0,
            "http://127.0.0.1:7420".to_string()
        );
    }

    #[test]
    fn a_grpc_target_is_the_host_and_port_of_the_base() {
        assert_eq!(grpc_target("http://127.0.0.1:7420"), "127.0.0.1:7420");
        assert_eq!(
            grpc_target("https://agents.example/prefix"),
            "agents.example:443"
        );
        assert_eq!(grpc_target("http://[::1]:7420"), "[::1]:7420");
        assert_eq!(grpc_target("http://[::1]"), "[::1]:80");
    }

    #[test]
    fn http_dates_are_imf_fixdate() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_764_547_200);
        assert_eq!(httpdate(t), "Mon, 01 Dec 2025 00:00:00 GMT");
    }
}
