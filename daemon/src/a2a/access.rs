//! Who may call which route: roostd's A2A token and each route's own,
//! compared in constant time, and how a card declares what is required.
//! The tokens can be replaced while roostd runs (SIGHUP).

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
#[derive(Debug, Default)]
pub struct Access {
    rules: std::sync::RwLock<Arc<Rules>>,
}

#[derive(Debug, Default)]
struct Rules {
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

    fn rules(&self) -> Arc<Rules> {
        Arc::clone(
            &self
                .rules
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Whether any route has a token of its own (else the route a request
    /// names need not be looked up to check it).
    pub fn per_route(&self) -> bool {
        !self.rules().routes.is_empty()
    }

    /// Whether a request to `route` (a session name) must send a token.
    pub fn required(&self, route: &str) -> bool {
        self.rules().required(route)
    }

    /// Whether `given` (the bearer token sent, if any) opens `route`.
    pub fn allows(&self, route: &str, given: Option<&str>) -> bool {
        self.rules().allows(route, given)
    }

    /// The card's `securitySchemes` entry for `route`, when it needs one.
    pub fn scheme_description(&self, route: &str) -> Option<String> {
        self.rules().scheme_description(route)
    }
}

impl Rules {
    fn required(&self, route: &str) -> bool {
        self.routes.contains_key(route) || self.global.is_some()
    }

    fn allows(&self, route: &str, given: Option<&str>) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn billing(accept_global: bool) -> HashMap<String, RouteToken> {
        let mut routes = HashMap::new();
        routes.insert(
            "billing".to_string(),
            RouteToken {
                token: Arc::from("billing-token-0123456789"),
                accept_global,
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
        let only_route = Access::new(None, billing(false));
        assert!(only_route.allows("other", None) && !only_route.required("other"));
        assert!(only_route.required("billing"));
        // Replaced while it runs: the old token no longer opens the route.
        only_route.replace(None, HashMap::new());
        assert!(only_route.allows("billing", None) && !only_route.required("billing"));
        let a = access(false);
        a.replace(Some(Arc::from("rotated-token-0123456789")), billing(false));
        assert!(!a.allows("other", Some("global-token-0123456789")));
        assert!(a.allows("other", Some("rotated-token-0123456789")));
    }
}
