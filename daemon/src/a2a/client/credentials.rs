//! What roostd presents to a peer elsewhere (`a2a.peers`), never a
//! capsule's own secret: a bearer token, an API key in the header the
//! peer's card names, an OAuth 2 client-credentials token (fetched from the
//! operator's token URL and kept until it expires), and the TLS settings
//! (CA, client certificate) its connections are made with. One lookup per
//! call ([`Peers::auth_for`]); the longest configured URL prefix decides.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::Value;

use super::{MAX_REPLY_BYTES, Peers, RemoteError};
use crate::http_client::ClientTls;

/// One `a2a.peers[]` entry, its secrets read.
pub struct PeerCredential {
    /// The URL prefix it is for.
    pub prefix: String,
    pub token: Option<Arc<str>>,
    pub api_key: Option<ApiKey>,
    pub oauth2: Option<OAuth2>,
    pub tls: Option<ClientTls>,
}

pub struct ApiKey {
    /// `api_key_header`: wins over what the card says.
    pub header: Option<String>,
    pub key: Arc<str>,
}

/// The client-credentials grant, and the token it last got.
pub struct OAuth2 {
    pub token_url: String,
    pub client_id: String,
    pub secret: Arc<str>,
    pub scopes: Vec<String>,
    held: std::sync::Mutex<Held>,
}

/// A token, until when it is used; a fetch under way, which every call
/// that needs a token meanwhile awaits (none holds a lock across it).
#[derive(Default)]
struct Held {
    token: Option<(Arc<str>, Instant)>,
    fetching: Option<Fetch>,
}

type Fetch = futures::future::Shared<
    futures::future::BoxFuture<'static, Result<(Arc<str>, Instant), String>>,
>;

/// A token is used for at least this long, whatever its `expires_in` says
/// (0 would mean a fetch for every call).
pub const MIN_LIFETIME_SECS: u64 = 30;
/// A token URL that does not answer within this long fails the fetch.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

impl OAuth2 {
    pub fn new(
        token_url: String,
        client_id: String,
        secret: Arc<str>,
        scopes: Vec<String>,
    ) -> Self {
        Self {
            token_url,
            client_id,
            secret,
            scopes,
            held: std::sync::Mutex::default(),
        }
    }

    /// A token still good for a while, fetched when there is none (one
    /// fetch at a time: calls that need it meanwhile wait for that one).
    async fn token(&self, tls: Option<&ClientTls>) -> Result<Arc<str>, RemoteError> {
        let fetch = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((token, until)) = held.token.as_ref()
                && Instant::now() < *until
            {
                return Ok(Arc::clone(token));
            }
            match &held.fetching {
                Some(fetch) => fetch.clone(),
                None => {
                    use futures::FutureExt;
                    let fetch = fetch_token(self.grant(), tls.cloned()).boxed().shared();
                    held.fetching = Some(fetch.clone());
                    fetch
                }
            }
        };
        let fetched = fetch.clone().await;
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held
            .fetching
            .as_ref()
            .is_some_and(|f| futures::future::Shared::ptr_eq(f, &fetch))
        {
            held.fetching = None;
            if let Ok(token) = &fetched {
                held.token = Some(token.clone());
            }
        }
        fetched.map(|(token, _)| token).map_err(RemoteError::OAuth2)
    }

    fn grant(&self) -> Grant {
        Grant {
            token_url: self.token_url.clone(),
            client_id: self.client_id.clone(),
            secret: Arc::clone(&self.secret),
            scopes: self.scopes.clone(),
        }
    }
}

/// What one fetch sends (owned: the fetch outlives the call that started
/// it when that call is dropped).
struct Grant {
    token_url: String,
    client_id: String,
    secret: Arc<str>,
    scopes: Vec<String>,
}

/// One client-credentials fetch, bounded by [`FETCH_TIMEOUT`]: the token and
/// until when to use it, or why there is none.
async fn fetch_token(grant: Grant, tls: Option<ClientTls>) -> Result<(Arc<str>, Instant), String> {
    let basic = base64::engine::general_purpose::STANDARD.encode(format!(
        "{}:{}",
        form(&grant.client_id),
        form(&grant.secret)
    ));
    let mut body = "grant_type=client_credentials".to_string();
    if !grant.scopes.is_empty() {
        body.push_str("&scope=");
        body.push_str(&form(&grant.scopes.join(" ")));
    }
    let authorization = format!("Basic {basic}");
    let headers = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("accept", "application/json"),
        ("authorization", authorization.as_str()),
    ];
    let exchange = crate::http_client::exchange_as(
        http::Method::POST,
        &grant.token_url,
        &headers,
        body.into_bytes(),
        MAX_REPLY_BYTES,
        tls.as_ref(),
    );
    let reply = match tokio::time::timeout(FETCH_TIMEOUT, exchange).await {
        Ok(reply) => reply.map_err(|e| format!("the token URL: {e}"))?,
        Err(_) => {
            return Err(format!(
                "the token URL did not answer within {} s",
                FETCH_TIMEOUT.as_secs()
            ));
        }
    };
    let (token, used) = read_token_answer(reply.status.as_u16(), &reply.body)?;
    let until = Instant::now() + Duration::from_secs(used);
    tracing::debug!(
        token_url = %crate::policy::redact_url(&grant.token_url),
        used_for_secs = used,
        "OAuth 2 token fetched for a peer"
    );
    Ok((token, until))
}

/// A token URL's answer (its status and body): the bearer token, and how
/// many seconds to use it for (a little less than it lives: an hour when
/// unsaid, a day at most so no answer can overflow the clock, never less
/// than [`MIN_LIFETIME_SECS`]); or why there is none. (Fuzzed:
/// `fuzz/fuzz_targets/oauth_token.rs`.)
pub fn read_token_answer(status: u16, body: &[u8]) -> Result<(Arc<str>, u64), String> {
    let answer: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if !(200..300).contains(&status) {
        let error = answer["error"].as_str().unwrap_or("no error named");
        return Err(format!(
            "the token URL answered {status}: {}",
            error.chars().take(200).collect::<String>()
        ));
    }
    let token = answer["access_token"]
        .as_str()
        // A bearer token is visible ASCII (RFC 6750's b64token is a part
        // of it): what every binding's header or metadata takes.
        .filter(|t| !t.is_empty() && t.bytes().all(|b| (0x21..=0x7e).contains(&b)))
        .ok_or_else(|| "the token URL's answer has no usable access_token".to_string())?;
    if let Some(kind) = answer["token_type"].as_str()
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err(format!(
            "the token URL gave a '{}' token; roostd sends bearer tokens",
            kind.chars().take(40).collect::<String>()
        ));
    }
    let lifetime = answer["expires_in"].as_u64().unwrap_or(3600).min(86_400);
    let margin = (lifetime / 10).clamp(1, 60);
    let used = lifetime.saturating_sub(margin).max(MIN_LIFETIME_SECS);
    Ok((Arc::from(token), used))
}

/// `application/x-www-form-urlencoded` of one value.
fn form(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// What one call presents: its headers, and the TLS settings its
/// connection is made with.
#[derive(Default, Clone)]
pub struct Auth {
    pub headers: Vec<(String, String)>,
    pub tls: Option<ClientTls>,
}

impl Auth {
    /// Whether roostd had anything for the peer (a refusal then names
    /// `a2a.peers` as what it refused).
    pub fn configured(&self) -> bool {
        !self.headers.is_empty() || self.tls.is_some()
    }

    /// Whether it carries authority of roostd's (a secret, a client
    /// certificate), not only trust in the peer's CA.
    pub fn authorizes(&self) -> bool {
        !self.headers.is_empty() || self.tls.as_ref().is_some_and(|t| t.presents)
    }

    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// `request`, to be made with these TLS settings (its headers come
    /// from [`Auth::pairs`] with the rest of the request's).
    pub fn with_tls(&self, request: http::request::Builder) -> http::request::Builder {
        match &self.tls {
            Some(tls) => request.extension(tls.clone()),
            None => request,
        }
    }
}

/// The header an API key goes in, as a card's security schemes name it:
/// 1.0's `apiKeySecurityScheme` or 0.3's `type: apiKey`, in a header (a
/// key for a query or a cookie is not sent there), one HTTP itself or the
/// bearer token uses refused.
pub fn card_api_key_header(card: &Value) -> Option<String> {
    let schemes = card.get("securitySchemes")?.as_object()?;
    schemes.values().find_map(|scheme| {
        let (location, name) = match scheme.get("apiKeySecurityScheme") {
            Some(s) => (s["location"].as_str()?, s["name"].as_str()?),
            None if scheme["type"] == "apiKey" => {
                (scheme["in"].as_str()?, scheme["name"].as_str()?)
            }
            None => return None,
        };
        (location.eq_ignore_ascii_case("header") && crate::config::api_key_header_allowed(name))
            .then(|| name.to_ascii_lowercase())
    })
}

/// The peer tasks each session sent with roostd's credentials, by session:
/// (the peer's origin, task id), newest last. A session keeps at most
/// [`OWNED_PER_SESSION`] (its oldest forgotten first: one session never
/// evicts another's), and at most [`OWNED_SESSIONS`] sessions are kept (the
/// one that sent least recently forgotten). A task id over
/// `peer_stream::MAX_ID_BYTES` is never kept (the call that got it fails).
/// Kept in memory: after a restart a session follows its earlier peer tasks
/// only where roostd has no credentials.
#[derive(Default)]
pub struct Owned {
    sessions: std::collections::HashMap<String, Sent>,
    /// Sessions in the order they last sent, oldest first.
    order: std::collections::VecDeque<String>,
}

/// One session's peer tasks.
#[derive(Default)]
struct Sent {
    keys: std::collections::HashSet<(String, String)>,
    order: std::collections::VecDeque<(String, String)>,
}

/// At most 64 Ki tasks in all (of ids up to 256 bytes): ~40 MiB at worst.
const OWNED_PER_SESSION: usize = 1024;
const OWNED_SESSIONS: usize = 64;

impl Owned {
    fn add(&mut self, caller: &str, key: (String, String)) {
        if !self.sessions.contains_key(caller) {
            if self.sessions.len() >= OWNED_SESSIONS
                && let Some(oldest) = self.order.pop_front()
            {
                self.sessions.remove(&oldest);
            }
            self.sessions.insert(caller.to_string(), Sent::default());
        } else if let Some(at) = self.order.iter().position(|c| c == caller) {
            self.order.remove(at);
        }
        self.order.push_back(caller.to_string());
        let Some(sent) = self.sessions.get_mut(caller) else {
            return;
        };
        if sent.keys.contains(&key) {
            return;
        }
        if sent.order.len() >= OWNED_PER_SESSION
            && let Some(old) = sent.order.pop_front()
        {
            sent.keys.remove(&old);
        }
        sent.keys.insert(key.clone());
        sent.order.push_back(key);
    }

    fn has(&self, caller: &str, key: &(String, String)) -> bool {
        self.sessions
            .get(caller)
            .is_some_and(|s| s.keys.contains(key))
    }
}

impl Peers {
    /// Notes that session `caller` sent task `task_id` to `origin`.
    pub(super) fn owns(&self, caller: &str, origin: &str, task_id: &str) {
        if task_id.len() > crate::runtime::peer_stream::MAX_ID_BYTES {
            return;
        }
        if let Ok(mut owned) = self.owned.lock() {
            owned.add(caller, (origin.into(), task_id.into()));
        }
    }

    /// Whether session `caller` may act on task `task_id` at `origin` with
    /// roostd's credentials: only one it sent there itself (credentials
    /// shared by every capsule must not let one follow, continue or cancel
    /// another's task).
    pub(super) fn may_act_on(&self, caller: &str, origin: &str, task_id: &str) -> bool {
        self.owned
            .lock()
            .is_ok_and(|owned| owned.has(caller, &(origin.into(), task_id.into())))
    }

    /// The configured entry for `peer_url`: the longest `a2a.peers` URL it
    /// starts with, at a path boundary (`https://a.example` is not a prefix
    /// of `https://a.example.evil`); `https://a.example/` covers the origin
    /// `https://a.example` itself (gRPC's).
    pub(super) fn credential_for(&self, peer_url: &str) -> Option<Arc<PeerCredential>> {
        self.credentials
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .find(|c| {
                peer_url
                    .strip_prefix(c.prefix.as_str())
                    .is_some_and(|rest| {
                        c.prefix.ends_with('/') || rest.is_empty() || rest.starts_with(['/', '?'])
                    })
                    || c.prefix.strip_suffix('/') == Some(peer_url)
            })
            .map(Arc::clone)
    }

    /// What a call to `peer_url` presents: the bearer (configured, or
    /// OAuth 2's), the API key in the header the card read for this peer
    /// names, the TLS settings.
    pub(super) async fn auth_for(&self, peer_url: &str) -> Result<Auth, RemoteError> {
        let Some(credential) = self.credential_for(peer_url) else {
            return Ok(Auth::default());
        };
        let mut auth = Auth {
            headers: Vec::new(),
            tls: credential.tls.clone(),
        };
        if let Some(token) = &credential.token {
            auth.headers
                .push(("authorization".into(), format!("Bearer {token}")));
        }
        if let Some(oauth2) = &credential.oauth2 {
            let token = oauth2.token(credential.tls.as_ref()).await?;
            auth.headers
                .push(("authorization".into(), format!("Bearer {token}")));
        }
        if let Some(key) = &credential.api_key {
            let header = key
                .header
                .clone()
                .or_else(|| self.card_header(&credential.prefix))
                .unwrap_or_else(|| "x-api-key".into());
            auth.headers.push((header, key.key.to_string()));
        }
        Ok(auth)
    }

    /// TLS settings alone, for reading a card (no secret goes with it).
    pub(super) fn tls_for(&self, url: &str) -> Option<ClientTls> {
        self.credential_for(url).and_then(|c| c.tls.clone())
    }

    /// Notes the API-key header a card read from `card_url` names, for the
    /// configured entry that covers that URL.
    pub(super) fn learn_card(&self, card_url: &str, card: &Value) {
        let (Some(credential), Some(header)) =
            (self.credential_for(card_url), card_api_key_header(card))
        else {
            return;
        };
        if credential
            .api_key
            .as_ref()
            .is_some_and(|k| k.header.is_none())
            && let Ok(mut headers) = self.api_key_headers.lock()
        {
            headers.insert(credential.prefix.clone(), header);
        }
    }

    fn card_header(&self, prefix: &str) -> Option<String> {
        self.api_key_headers.lock().ok()?.get(prefix).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_token_answer_gives_a_visible_ascii_bearer_or_none() {
        let answer = |token: &str| {
            read_token_answer(200, json!({"access_token": token}).to_string().as_bytes())
        };
        // The fuzzer's find: a token of other characters was taken.
        for bad in ["埕jjjxac", "a b", "tab\there", ""] {
            let err = answer(bad).expect_err(bad);
            assert!(err.contains("no usable access_token"), "{err}");
        }
        // The control: an RFC 6750 token is taken, kept a lifetime.
        let (token, secs) = answer("eyJ0eXAi.x-_~+/9=").expect("a token");
        assert_eq!(&*token, "eyJ0eXAi.x-_~+/9=");
        assert!(secs >= MIN_LIFETIME_SECS);
    }

    #[test]
    fn a_cards_api_key_header_is_read_in_either_version_and_refused_where_it_could_harm() {
        let v10 = json!({"securitySchemes": {"k": {"apiKeySecurityScheme":
            {"location": "header", "name": "X-Peer-Key"}}}});
        assert_eq!(card_api_key_header(&v10).as_deref(), Some("x-peer-key"));
        let v03 = json!({"securitySchemes": {"k": {"type": "apiKey", "in": "header", "name": "Api-Key"}}});
        assert_eq!(card_api_key_header(&v03).as_deref(), Some("api-key"));
        for refused in [
            json!({"securitySchemes": {"k": {"type": "apiKey", "in": "query", "name": "key"}}}),
            json!({"securitySchemes": {"k": {"type": "apiKey", "in": "header", "name": "Host"}}}),
            json!({"securitySchemes": {"k": {"type": "apiKey", "in": "header", "name": "Content-Length"}}}),
            json!({"securitySchemes": {"k": {"type": "apiKey", "in": "header", "name": "bad header"}}}),
            json!({"securitySchemes": {"k": {"type": "http", "scheme": "bearer"}}}),
        ] {
            assert_eq!(card_api_key_header(&refused), None, "{refused}");
        }
        assert_eq!(form("a b&c=d/é"), "a+b%26c%3Dd%2F%C3%A9");
    }

    #[test]
    fn a_session_forgets_only_its_own_oldest_peer_tasks() {
        let mut owned = Owned::default();
        let key = |n: usize| ("https://peer".to_string(), format!("t{n}"));
        owned.add("victim", key(0));
        for n in 0..OWNED_PER_SESSION + 10 {
            owned.add("flooder", key(n));
        }
        assert!(
            owned.has("victim", &key(0)),
            "another session's flood evicts nothing of it"
        );
        assert!(!owned.has("flooder", &key(0)), "its own oldest went");
        assert!(owned.has("flooder", &key(OWNED_PER_SESSION + 9)));
        assert!(
            !owned.has("victim", &key(1)),
            "the control: an id it never sent"
        );
    }

    /// A token URL on loopback: `/token` answers `expires_in: 0` at once,
    /// `/slow` after a second and a half, `/never` not at all; each counts
    /// the fetches it got.
    async fn token_url() -> (String, Arc<[std::sync::atomic::AtomicUsize; 3]>) {
        use std::sync::atomic::Ordering;
        let hits: Arc<[std::sync::atomic::AtomicUsize; 3]> = Arc::default();
        let answer = || {
            axum::Json(json!({"access_token": "tok-1", "token_type": "Bearer", "expires_in": 0}))
        };
        let (h0, h1, h2) = (Arc::clone(&hits), Arc::clone(&hits), Arc::clone(&hits));
        let app = axum::Router::new()
            .route(
                "/token",
                axum::routing::post(move || async move {
                    h0[0].fetch_add(1, Ordering::SeqCst);
                    answer()
                }),
            )
            .route(
                "/slow",
                axum::routing::post(move || async move {
                    h1[1].fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                    answer()
                }),
            )
            .route(
                "/never",
                axum::routing::post(move || async move {
                    h2[2].fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<()>().await;
                    answer()
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), hits)
    }

    fn grant(url: String) -> OAuth2 {
        OAuth2::new(url, "client".into(), Arc::from("secret"), Vec::new())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_token_lives_its_minimum_and_calls_at_once_share_one_fetch() {
        use std::sync::atomic::Ordering;
        let (url, hits) = token_url().await;
        // `expires_in: 0` is not a fetch per call.
        let eager = grant(format!("{url}/token"));
        for _ in 0..20 {
            assert_eq!(&*eager.token(None).await.expect("token"), "tok-1");
        }
        assert_eq!(hits[0].load(Ordering::SeqCst), 1);
        // Five calls while a slow fetch is under way wait for that one.
        let slow = Arc::new(grant(format!("{url}/slow")));
        let calls: Vec<_> = (0..5)
            .map(|_| {
                let slow = Arc::clone(&slow);
                tokio::spawn(async move { slow.token(None).await.map(|t| t.to_string()) })
            })
            .collect();
        for call in calls {
            assert_eq!(call.await.expect("join").expect("token"), "tok-1");
        }
        assert_eq!(hits[1].load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_url_that_never_answers_fails_the_fetch_in_time_and_holds_no_lock() {
        let (url, _) = token_url().await;
        let never = Arc::new(grant(format!("{url}/never")));
        let first = tokio::spawn({
            let never = Arc::clone(&never);
            async move { never.token(None).await }
        });
        tokio::task::yield_now().await;
        // The lock is not held across the fetch: another look at the token
        // is answered (by the same fetch's failure) rather than queued
        // behind a lock.
        let second = never.token(None).await.expect_err("no token");
        assert!(
            second.to_string().contains("did not answer within 10 s"),
            "{second}"
        );
        assert!(first.await.expect("join").is_err());
    }
}
