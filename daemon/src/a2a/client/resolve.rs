//! A peer's interface for `murmur:peer/call@0.2.0`: as given (an
//! endpoint), or read from its agent card — 1.0's `supportedInterfaces`, or
//! 0.3's `url`, `preferredTransport` and `additionalInterfaces` — matched to
//! the binding and version asked for.

use serde_json::Value;

use super::{CARD_PATH, MAX_REPLY_BYTES, Peers, RemoteError};
use crate::runtime::{PeerBinding, PeerInterface, PeerTarget};

impl Peers {
    /// The interface `target` names: as given (`endpoint`), else the one of
    /// its card that matches the binding and version asked for (the card's
    /// first roostd speaks, 1.0 before 0.3).
    pub(super) async fn resolve_card(
        &self,
        target: &PeerTarget,
    ) -> Result<PeerInterface, RemoteError> {
        if target.endpoint {
            return Ok(PeerInterface {
                url: target.url.clone(),
                binding: target.binding.unwrap_or(PeerBinding::JsonRpc),
                v03: target.v03.unwrap_or(false),
                tenant: target.tenant.clone(),
            });
        }
        let url = if target.url.ends_with(".json") {
            target.url.clone()
        } else {
            format!("{}{CARD_PATH}", target.url.trim_end_matches('/'))
        };
        let card = self.read_card(&url).await?;
        let mut found = interfaces(&card);
        // A gRPC interface a card names as `host:port` (no scheme, as A2A
        // writes it) is reached over TLS when the card came over HTTPS.
        if url.starts_with("https://") {
            for i in &mut found {
                if i.binding == PeerBinding::Grpc && !i.url.contains("://") {
                    i.url = format!("https://{}", i.url);
                }
            }
        }
        // Newest first, otherwise in the card's order.
        found.sort_by_key(|i| i.v03);
        let wanted = |i: &&PeerInterface| {
            target.binding.is_none_or(|b| b == i.binding) && target.v03.is_none_or(|v| v == i.v03)
        };
        found.iter().find(wanted).cloned().ok_or_else(|| {
            let listed: Vec<String> = found
                .iter()
                .map(|i| {
                    format!(
                        "{} {}",
                        binding_name(i.binding),
                        if i.v03 { "0.3" } else { "1.0" }
                    )
                })
                .collect();
            RemoteError::Card(format!(
                "its card lists no interface for what was asked; it lists: {}",
                if listed.is_empty() {
                    "none roostd speaks".to_string()
                } else {
                    listed.join(", ")
                }
            ))
        })
    }
}

impl Peers {
    /// The agent card at `url`, read with the TLS settings `a2a.peers` has
    /// for it (no secret goes with it); the API-key header it names is
    /// noted for the entry that covers it.
    pub(super) async fn read_card(&self, url: &str) -> Result<Value, RemoteError> {
        let reply = crate::http_client::exchange_as(
            http::Method::GET,
            url,
            &[],
            Vec::new(),
            MAX_REPLY_BYTES,
            self.tls_for(url).as_ref(),
        )
        .await?;
        if !reply.status.is_success() {
            return Err(RemoteError::Card(format!(
                "{url} answered {} instead of an agent card",
                reply.status
            )));
        }
        let card: Value = serde_json::from_slice(&reply.body)
            .map_err(|e| RemoteError::Card(format!("{url} is not JSON: {e}")))?;
        self.learn_card(url, &card);
        Ok(card)
    }
}

pub(super) fn binding_name(b: PeerBinding) -> &'static str {
    match b {
        PeerBinding::JsonRpc => "JSONRPC",
        PeerBinding::HttpJson => "HTTP+JSON",
        PeerBinding::Grpc => "GRPC",
    }
}

/// The interfaces a card lists that roostd speaks: 1.0's
/// `supportedInterfaces`, else 0.3's `url`, `preferredTransport` and
/// `additionalInterfaces`.
fn interfaces(card: &Value) -> Vec<PeerInterface> {
    let binding = |name: &str| match name.to_ascii_uppercase().as_str() {
        "JSONRPC" => Some(PeerBinding::JsonRpc),
        "HTTP+JSON" => Some(PeerBinding::HttpJson),
        "GRPC" => Some(PeerBinding::Grpc),
        _ => None,
    };
    let version_03 = |v: &str| v.starts_with("0.");
    if let Some(list) = card["supportedInterfaces"].as_array() {
        return list
            .iter()
            .filter_map(|i| {
                let version = i["protocolVersion"].as_str().unwrap_or("1.0");
                if !version.starts_with("1.") && !version.starts_with("0.3") {
                    return None;
                }
                Some(PeerInterface {
                    url: i["url"].as_str()?.to_string(),
                    binding: binding(i["protocolBinding"].as_str()?)?,
                    v03: version_03(version),
                    tenant: i["tenant"].as_str().map(str::to_string),
                })
            })
            .collect();
    }
    let mut found = Vec::new();
    if let Some(url) = card["url"].as_str() {
        let preferred = card["preferredTransport"].as_str().unwrap_or("JSONRPC");
        let extra = card["additionalInterfaces"]
            .as_array()
            .into_iter()
            .flatten();
        let listed = std::iter::once((url, preferred))
            .chain(extra.filter_map(|i| Some((i["url"].as_str()?, i["transport"].as_str()?))));
        for (url, transport) in listed {
            if let Some(binding) = binding(transport)
                && !found
                    .iter()
                    .any(|f: &PeerInterface| f.binding == binding && f.url == url)
            {
                found.push(PeerInterface {
                    url: url.to_string(),
                    binding,
                    v03: true,
                    tenant: None,
                });
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cards_interfaces_are_read_from_either_version() {
        let v10 = json!({"supportedInterfaces": [
            {"url": "http://h/a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "h:1", "protocolBinding": "GRPC", "protocolVersion": "1.0", "tenant": "a"},
            {"url": "http://h/a", "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3"},
            {"url": "http://h/a", "protocolBinding": "SOAP", "protocolVersion": "1.0"},
        ]});
        let found = interfaces(&v10);
        assert_eq!(found.len(), 3);
        assert_eq!(found[1].tenant.as_deref(), Some("a"));
        assert!(found[2].v03);
        let v03 = json!({"url": "http://h/b", "preferredTransport": "JSONRPC",
            "additionalInterfaces": [{"url": "http://h/b", "transport": "JSONRPC"},
                                     {"url": "h:2", "transport": "GRPC"}]});
        let found = interfaces(&v03);
        assert_eq!(
            found
                .iter()
                .map(|i| (i.binding, i.url.as_str(), i.v03))
                .collect::<Vec<_>>(),
            vec![
                (PeerBinding::JsonRpc, "http://h/b", true),
                (PeerBinding::Grpc, "h:2", true)
            ]
        );
    }
}
