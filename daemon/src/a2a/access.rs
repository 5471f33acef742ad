//! Who may call which route: roostd's A2A token and each route's own,
//! compared in constant time, and how a card declares what is required.

use std::collections::HashMap;
use std::sync::Arc;

/// A route's own token (`a2a.routes.<name>.token_file`).
#[derive(Debug, Clone)]
pub struct RouteToken {
    pub token: Arc<str>,
    /// Whether roostd's token (`a2a.token_file`) opens the route too.
    pub accept_global: bool,
}

/// The tokens the gateway checks. A route with a token of its own takes
/// that one (and roostd's, with `accept_global`); any other route takes
/// roostd's token, or anyone when there is none.
#[derive(Debug, Clone, Default)]
pub struct Access {
    global: Option<Arc<str>>,
    routes: HashMap<String, RouteToken>,
}

impl Access {
    pub fn new(global: Option<Arc<str>>, routes: HashMap<String, RouteToken>) -> Self {
        Self { global, routes }
    }

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
        let matches = |t: &Arc<str>| {
            given.is_some_and(|g| crate::api::constant_time_eq(g.as_bytes(), t.as_bytes()))
        };
        match self.routes.get(route) {
            Some(own) => {
                // Both comparisons run, so the time taken does not say which
                // token was close.
                let own_ok = matches(&own.token);
                let global_ok = own.accept_global && self.global.as_ref().is_some_and(matches);
                own_ok | global_ok
            }
            None => self.global.as_ref().is_none_or(matches),
        }
    }

    /// The card's `securitySchemes` entry for `route`, when it needs one.
    pub fn scheme_description(&self, route: &str) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn access(accept_global: bool) -> Access {
        let mut routes = HashMap::new();
        routes.insert(
            "billing".to_string(),
            RouteToken {
                token: Arc::from("billing-token-0123456789"),
                accept_global,
            },
        );
        Access::new(Some(Arc::from("global-token-0123456789")), routes)
    }

    #[test]
    fn a_route_with_its_own_token_takes_only_that_one_unless_told() {
        let a = access(false);
        assert!(a.allows("billing", Some("billing-token-0123456789")));
        assert!(!a.allows("billing", Some("global-token-0123456789")));
        assert!(!a.allows("billing", None));
        assert!(!a.allows("other", Some("billing-token-0123456789")));
        assert!(a.allows("other", Some("global-token-0123456789")));
        let a = access(true);
        assert!(a.allows("billing", Some("global-token-0123456789")));
        let open = Access::default();
        assert!(open.allows("any", None) && !open.required("any"));
        let only_route = Access::new(None, access(false).routes);
        assert!(only_route.allows("other", None) && !only_route.required("other"));
        assert!(only_route.required("billing"));
    }
}
