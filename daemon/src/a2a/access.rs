//! Who may call which route: what a request's route segment names (decoded
//! and checked once, here, for every binding), roostd's A2A token and each
//! route's own, compared in constant time, and how a card declares what is
//! required. The tokens can be replaced while roostd runs (SIGHUP); a request
//! is checked against one snapshot of them.

use std::collections::HashMap;
use std::sync::Arc;

/// A route's own tokens: one (`a2a.routes.<name>.token_file`), and one per
/// client (`clients.<client>.token_file`).
#[derive(Debug, Clone)]
pub struct RouteToken {
    pub token: Option<Arc<str>>,
    /// Whether roostd's token (`a2a.token_file`) opens the route too.
    pub accept_global: bool,
    /// (client, token): a client's token makes it the owner of its tasks.
    pub clients: Vec<(String, Arc<str>)>,
}

/// The tokens the gateway checks. A route with a token of its own takes
/// that one (and roostd's, with `accept_global`); any other route takes
/// roostd's token, or anyone when there is none.
#[derive(Debug, Default)]
pub struct Access {
    rules: std::sync::RwLock<Arc<Rules>>,
}

/// The tokens at one moment: a request reads them once, so a reload cannot
/// answer half of it with the old tokens and half with the new.
#[derive(Debug, Default)]
pub struct Rules {
    global: Option<Arc<str>>,
    routes: HashMap<String, RouteToken>,
}

impl Access {
    pub fn new(global: Option<Arc<str>>, routes: HashMap<String, RouteToken>) -> Self {
        Self {
            rules: std::sync::RwLock::new(Arc::new(Rules { global, routes })),
        }
    }

    /// Every request from now on is checked against these tokens.
    pub fn replace(&self, global: Option<Arc<str>>, routes: HashMap<String, RouteToken>) {
        *self
            .rules
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Arc::new(Rules { global, routes });
    }

    /// The tokens now, for one request.
    pub fn snapshot(&self) -> Arc<Rules> {
        Arc::clone(
            &self
                .rules
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The card's `securitySchemes` entry for `route`, when it needs one.
    pub fn scheme_description(&self, route: &str) -> Option<String> {
        self.snapshot().scheme_description(route)
    }
}

impl Rules {
    /// Whether any route has a token of its own (else the route a request
    /// names need not be looked up to check it).
    pub fn per_route(&self) -> bool {
        !self.routes.is_empty()
    }

    /// Whether a request to `route` (a session name) must send a token.
    pub fn required(&self, route: &str) -> bool {
        self.routes.contains_key(route) || self.global.is_some()
    }

    /// Whether `given` (the bearer token sent, if any) opens `route`.
    pub fn allows(&self, route: &str, given: Option<&str>) -> bool {
        self.caller(route, given).is_some()
    }

    /// Who `given` makes the caller of `route`, if it opens it: the client
    /// whose token it is, or `""` (the route's one token, roostd's, or an
    /// open route: one owner, as before clients).
    pub fn caller(&self, route: &str, given: Option<&str>) -> Option<String> {
        let matches = |t: &Arc<str>| {
            given.is_some_and(|g| crate::api::constant_time_eq(g.as_bytes(), t.as_bytes()))
        };
        match self.routes.get(route) {
            Some(own) => {
                // Every comparison runs, so the time taken does not say
                // which token was close.
                let own_ok = own.token.as_ref().is_some_and(matches);
                let global_ok = own.accept_global && self.global.as_ref().is_some_and(matches);
                let mut client = None;
                for (name, token) in &own.clients {
                    if matches(token) {
                        client = Some(name.clone());
                    }
                }
                client.or_else(|| (own_ok | global_ok).then(String::new))
            }
            None => self.global.as_ref().is_none_or(matches).then(String::new),
        }
    }

    fn scheme_description(&self, route: &str) -> Option<String> {
        match self.routes.get(route) {
            Some(own) if own.accept_global && self.global.is_some() => Some(format!(
                "this agent's token (roostd's a2a.routes.{route}.token_file) or roostd's \
                 (a2a.token_file)"
            )),
            Some(_) => Some(format!(
                "this agent's token (roostd's a2a.routes.{route}.token_file)"
            )),
            None => self
                .global
                .as_ref()
                .map(|_| "the token in roostd's a2a.token_file".to_string()),
        }
    }
}

/// What a route names, decoded once: the session name or id that the token
/// check, the lookup and the handler all use. `raw` is the segment as sent
/// (percent-encoded in a URL; a gRPC `tenant` as it is): `bill%69ng` is
/// `billing` and is checked as `billing`, and anything that does not decode
/// to a session name (lowercase letters, digits, '-') or id (`ses_` and 32
/// hex digits) — `%2F`, upper case, an empty segment, bad escapes — is
/// refused before any token or route is looked at.
pub fn route_name(raw: &str) -> Result<String, String> {
    let decoded = decode_segment(raw).ok_or_else(|| {
        format!("'{raw}' is not a valid route: a percent escape does not decode to UTF-8")
    })?;
    let is_id = decoded.strip_prefix("ses_").is_some_and(|hex| {
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if is_id || roost_wire::artifact::names::validate_name(&decoded).is_ok() {
        return Ok(decoded);
    }
    Err(format!(
        "'{raw}' is not a valid route: an agent is addressed by its session's name \
         (lowercase letters, digits and '-') or id"
    ))
}

/// A path segment's percent escapes decoded (`+` stays `+`); `None` for an
/// escape that is cut short or bytes that are not UTF-8.
fn decode_segment(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = raw.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_is_what_its_segment_decodes_to_or_refused() {
        assert_eq!(route_name("billing").as_deref(), Ok("billing"));
        assert_eq!(route_name("bill%69ng").as_deref(), Ok("billing"));
        assert_eq!(route_name("bill%69NG").ok(), None, "upper case is no name");
        assert_eq!(route_name("%42illing").ok(), None, "%42 is 'B'");
        let id = "ses_0192f0a1b2c3d4e5f60718293a4b5c6d";
        assert_eq!(route_name(id).as_deref(), Ok(id));
        for bad in [
            "",
            "billing%2F",
            "billing%2fx",
            "a%2e%2e",
            "..",
            "b%",
            "b%6",
            "b%zz",
            "b%ff",
            "Billing",
            "billing ",
            "bill+ing",
            "ses_xyz",
        ] {
            assert!(route_name(bad).is_err(), "{bad:?} must be refused");
        }
    }

    fn billing(accept_global: bool) -> HashMap<String, RouteToken> {
        let mut routes = HashMap::new();
        routes.insert(
            "billing".to_string(),
            RouteToken {
                token: Some(Arc::from("billing-token-0123456789")),
                accept_global,
                clients: vec![
                    ("alice".into(), Arc::from("alice-token-0123456789")),
                    ("bob".into(), Arc::from("bob-token-0123456789")),
                ],
            },
        );
        routes
    }

    fn access(accept_global: bool) -> Access {
        Access::new(
            Some(Arc::from("global-token-0123456789")),
            billing(accept_global),
        )
    }

    #[test]
    fn a_route_with_its_own_token_takes_only_that_one_unless_told() {
        let a = access(false).snapshot();
        assert!(a.allows("billing", Some("billing-token-0123456789")));
        assert!(!a.allows("billing", Some("global-token-0123456789")));
        assert!(!a.allows("billing", None));
        assert!(!a.allows("other", Some("billing-token-0123456789")));
        assert!(a.allows("other", Some("global-token-0123456789")));
        let a = access(true).snapshot();
        assert!(a.allows("billing", Some("global-token-0123456789")));
        // Each client's token names its owner; the route's one token and
        // roostd's name none ("").
        let caller = |t: &str| a.caller("billing", Some(t));
        assert_eq!(caller("alice-token-0123456789").as_deref(), Some("alice"));
        assert_eq!(caller("bob-token-0123456789").as_deref(), Some("bob"));
        assert_eq!(caller("billing-token-0123456789").as_deref(), Some(""));
        assert_eq!(caller("global-token-0123456789").as_deref(), Some(""));
        assert_eq!(caller("wrong-token-0123456789"), None);
        assert_eq!(a.caller("other", Some("alice-token-0123456789")), None);
        let open = Access::default().snapshot();
        assert!(open.allows("any", None) && !open.required("any"));
        let only_route = Access::new(None, billing(false));
        let before = only_route.snapshot();
        assert!(before.allows("other", None) && !before.required("other"));
        assert!(before.required("billing"));
        // Replaced while it runs: the old token no longer opens the route,
        // and a request that took its snapshot before is answered whole by it.
        only_route.replace(None, HashMap::new());
        let after = only_route.snapshot();
        assert!(after.allows("billing", None) && !after.required("billing"));
        assert!(before.required("billing") && !before.allows("billing", None));
        let a = access(false);
        a.replace(Some(Arc::from("rotated-token-0123456789")), billing(false));
        let a = a.snapshot();
        assert!(!a.allows("other", Some("global-token-0123456789")));
        assert!(a.allows("other", Some("rotated-token-0123456789")));
    }
}
