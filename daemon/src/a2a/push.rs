//! Push notifications over HTTP: a config's URL checked against the SSRF
//! guard (`a2a.push.allow`), configs on the wire (1.0 and 0.3), and the
//! deliverer that drains the outbox (`push/deliver.rs`).

mod deliver;
pub use deliver::{MAX_ATTEMPTS, deliver};

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde_json::{Value, json};

use super::error::A2aError;
use super::wire::Dialect;
use crate::ids::TaskId;
use crate::tasks::{PushConfig, PushMade, PushVersion};

/// How long one delivery may take (connect, send, answer), and a push
/// URL's host lookup.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest push URL accepted.
const MAX_URL: usize = 2048;

/// Where push notifications may go: public addresses, and the hosts
/// `a2a.push.allow` lists (by name or address, as written in the URL),
/// whatever they resolve to.
#[derive(Debug, Clone)]
pub struct PushPolicy {
    allow: Vec<String>,
    /// Configs one task may have (`a2a.push.max_configs_per_task`).
    max_configs: u32,
    /// Deliveries in flight at once to one receiving host
    /// (`a2a.push.max_in_flight_per_host`).
    per_host: usize,
}

impl Default for PushPolicy {
    fn default() -> Self {
        Self::new(&crate::config::PushSettings::default())
    }
}

/// A push URL that passed the guard: where to connect.
#[derive(Debug)]
pub struct Target {
    pub addr: SocketAddr,
}

impl PushPolicy {
    pub fn new(settings: &crate::config::PushSettings) -> Self {
        Self {
            allow: settings
                .allow
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            max_configs: settings.max_configs_per_task,
            per_host: settings.max_in_flight_per_host,
        }
    }

    /// Configs one task may have.
    pub fn max_configs(&self) -> u32 {
        self.max_configs
    }

    /// Checks `url`: an absolute `http://` or `https://` URL whose host
    /// resolves to public addresses only, unless the host is listed.
    /// `Ok(None)`: the host does not resolve now (a config may still be
    /// made; a delivery waits for it).
    pub async fn check(&self, url: &str) -> Result<Option<Target>, String> {
        if url.len() > MAX_URL {
            return Err(format!("the push URL is over {MAX_URL} bytes"));
        }
        let uri: http::Uri = url.parse().map_err(|_| format!("'{url}' is not a URL"))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(format!("'{url}' must be an http:// or https:// URL")),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| format!("'{url}' has no host"))?;
        let host = authority
            .host()
            .trim_matches(['[', ']'])
            .to_ascii_lowercase();
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let listed = self.allow.contains(&host);
        let resolved = tokio::time::timeout(
            DELIVERY_TIMEOUT,
            tokio::net::lookup_host((host.as_str(), port)),
        )
        .await;
        let addrs: Vec<SocketAddr> = match resolved {
            Ok(Ok(addrs)) => addrs.collect(),
            _ => return Ok(None),
        };
        let Some(&first) = addrs.first() else {
            return Ok(None);
        };
        if !listed && let Some(bad) = addrs.iter().find(|a| not_public(a.ip())) {
            return Err(format!(
                "'{host}' resolves to {}, a loopback, private or reserved address; push \
                 notifications go there only if roostd's a2a.push.allow lists '{host}'",
                bad.ip()
            ));
        }
        Ok(Some(Target { addr: first }))
    }
}

/// Loopback, private, link-local, shared, reserved, multicast, unspecified
/// or documentation addresses. An IPv6 address that carries an IPv4 one
/// (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`, translated
/// `::ffff:0:a.b.c.d`) is judged as that IPv4 address; the prefixes that
/// reach IPv4 or other networks through a relay (NAT64 `64:ff9b::/32`
/// including the local-use `64:ff9b:1::/48`, 6to4 `2002::/16`, Teredo
/// `2001::/32`) are never public here.
pub fn not_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || a >= 240
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0)
                || (a == 198 && (18..20).contains(&b))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let embedded = |hi: u16, lo: u16| {
                let [a, b] = hi.to_be_bytes();
                let [c, d] = lo.to_be_bytes();
                not_public(IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d)))
            };
            match s {
                // Mapped and compatible (`::` and `::1` among them: 0.0.0.x).
                [0, 0, 0, 0, 0, 0xffff | 0, hi, lo] => return embedded(hi, lo),
                // Translated (RFC 2765).
                [0, 0, 0, 0, 0xffff, 0, hi, lo] => return embedded(hi, lo),
                _ => {}
            }
            let first = s[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || (first & 0xffc0) == 0xfec0
                || (first == 0x2001 && s[1] == 0x0db8)
                // NAT64, well-known and local-use.
                || (first == 0x64 && s[1] == 0xff9b)
                // 6to4 and Teredo.
                || first == 0x2002
                || (first == 0x2001 && s[1] == 0)
                // Benchmarking, discard-only.
                || (first == 0x2001 && s[1] == 0x0002 && s[2] == 0)
                || (first == 0x0100 && s[1..4] == [0, 0, 0])
        }
    }
}

/// A config as a client sent it (1.0 flat, or 0.3's
/// `pushNotificationConfig`), for `task_id`; its id defaults to the task's.
pub fn config_from_params(task_id: &str, params: &Value) -> Result<PushConfig, A2aError> {
    let c = params
        .get("pushNotificationConfig")
        .or_else(|| params.get("push_notification_config"))
        .unwrap_or(params);
    let text = |v: Option<&Value>, what: &str| -> Result<Option<String>, A2aError> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) if s.len() <= MAX_URL => Ok(Some(s.clone())),
            Some(_) => Err(A2aError::InvalidParams(format!(
                "{what} must be a string of at most {MAX_URL} bytes"
            ))),
        }
    };
    let url = text(c.get("url"), "url")?
        .ok_or_else(|| A2aError::InvalidParams("a push notification config needs a url".into()))?;
    let auth = c.get("authentication");
    // 1.0: `scheme`; 0.3: `schemes` (the first one is used).
    let scheme = match auth {
        Some(a) => match a.get("scheme") {
            Some(s) => text(Some(s), "authentication.scheme")?,
            None => text(
                a.get("schemes").and_then(|s| s.get(0)),
                "authentication.schemes",
            )?,
        },
        None => None,
    };
    let credentials = text(
        auth.and_then(|a| a.get("credentials")),
        "authentication.credentials",
    )?;
    let token = text(c.get("token"), "token")?;
    for value in [&token, &scheme, &credentials].into_iter().flatten() {
        if value.chars().any(|ch| ch.is_control()) {
            return Err(A2aError::InvalidParams(
                "token and authentication must not hold control characters".into(),
            ));
        }
    }
    Ok(PushConfig {
        task_id: task_id.into(),
        id: text(c.get("id"), "id")?.unwrap_or_else(|| task_id.to_string()),
        url,
        token,
        auth_scheme: scheme,
        auth_credentials: credentials,
        // The caller says whose it is.
        version: PushVersion::V10,
    })
}

/// What a client of version `d` reads from its receiver.
fn version_of(d: Dialect) -> PushVersion {
    match d {
        Dialect::V10 => PushVersion::V10,
        Dialect::V03 => PushVersion::V03,
    }
}

/// A config on the wire: 1.0's `TaskPushNotificationConfig`, or 0.3's
/// `{taskId, pushNotificationConfig}`.
pub fn config_json(c: &PushConfig, d: Dialect) -> Value {
    let mut inner = json!({"id": c.id, "url": c.url});
    if let Some(t) = &c.token {
        inner["token"] = json!(t);
    }
    if let Some(scheme) = &c.auth_scheme {
        let mut auth = match d {
            Dialect::V10 => json!({"scheme": scheme}),
            Dialect::V03 => json!({"schemes": [scheme]}),
        };
        if let Some(cred) = &c.auth_credentials {
            auth["credentials"] = json!(cred);
        }
        inner["authentication"] = auth;
    }
    match d {
        Dialect::V10 => {
            inner["taskId"] = json!(c.task_id);
            inner
        }
        Dialect::V03 => json!({"taskId": c.task_id, "pushNotificationConfig": inner}),
    }
}

/// A create's outcome as the client hears it.
pub(super) fn made(made: PushMade, task_id: &str, max: u32) -> Result<(), A2aError> {
    match made {
        PushMade::Made => Ok(()),
        PushMade::NoTask => Err(A2aError::TaskNotFound(format!(
            "no task '{task_id}' at this agent"
        ))),
        PushMade::Full => Err(A2aError::InvalidParams(format!(
            "task '{task_id}' has {} push notification configs, its limit (roostd's \
             a2a.push.max_configs_per_task): delete one first",
            max
        ))),
    }
}

/// A push config operation of a route's task: create (or replace), get,
/// list, delete.
pub(super) async fn op(
    gw: &super::Gateway,
    at: super::At<'_>,
    d: Dialect,
    op: super::envelope::Op,
    params: &Value,
) -> Result<Value, A2aError> {
    use super::envelope::Op;
    let Some(policy) = &gw.push else {
        return Err(A2aError::PushNotSupported);
    };
    let text = |k: &str| {
        params
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    // 1.0 names the task `taskId` (and the config `id`); 0.3's get, list
    // and delete name the task `id` (and the config
    // `pushNotificationConfigId`).
    let (task_id, config_id) = match (d, op) {
        (Dialect::V03, Op::PushGet | Op::PushList | Op::PushDelete) => {
            (text("id"), text("pushNotificationConfigId"))
        }
        _ => (text("taskId").or_else(|| text("task_id")), text("id")),
    };
    let task_id =
        task_id.ok_or_else(|| A2aError::InvalidParams("the task's id is required".into()))?;
    let task = super::own_task(gw, at, &TaskId::from(task_id)).await?;
    let broker = &gw.tasks;
    let not_found = |id: &str| {
        A2aError::TaskNotFound(format!(
            "task '{task_id}' has no push notification config '{id}'"
        ))
    };
    match op {
        Op::PushCreate => {
            let mut config = config_from_params(&task.id, params)?;
            config.version = version_of(at.client);
            check(policy, &config.url).await?;
            made(
                broker
                    .create_push_config(&config, false, policy.max_configs)
                    .await?,
                &task.id,
                policy.max_configs,
            )?;
            tracing::info!(task_id = %task.id, config = %config.id, "push notification config set");
            Ok(config_json(&config, d))
        }
        Op::PushGet => {
            let id = config_id.unwrap_or(task_id);
            let configs = broker.push_configs(&task.id).await?;
            let found = configs
                .iter()
                .find(|c| c.id == id)
                .ok_or_else(|| not_found(id))?;
            Ok(config_json(found, d))
        }
        Op::PushList => {
            let configs = broker.push_configs(&task.id).await?;
            let list: Vec<Value> = configs.iter().map(|c| config_json(c, d)).collect();
            Ok(match d {
                Dialect::V10 => json!({"configs": list, "nextPageToken": ""}),
                Dialect::V03 => json!(list),
            })
        }
        Op::PushDelete => {
            let id = config_id.unwrap_or(task_id);
            // Deleting what is not there is not an error (as the SDK's
            // server does).
            broker.delete_push_config(&task.id, id).await?;
            Ok(match d {
                Dialect::V10 => json!({}),
                Dialect::V03 => Value::Null,
            })
        }
        _ => Err(A2aError::Internal(
            "not a push notification operation".into(),
        )),
    }
}

/// The guard's answer as the binding's error: InvalidParams, saying what
/// to change.
pub(super) async fn check(policy: &PushPolicy, url: &str) -> Result<(), A2aError> {
    policy.check(url).await.map(drop).map_err(|why| {
        tracing::warn!(%why, "push notification URL refused");
        A2aError::InvalidParams(format!("push notification URL refused: {why}"))
    })
}

/// The push config a `SendMessage` carries in its `configuration`
/// (1.0 `taskPushNotificationConfig`, 0.3 `pushNotificationConfig`),
/// checked; its task id is filled in once the task exists.
pub(super) async fn from_send(
    gw: &super::Gateway,
    client: Dialect,
    params: &Value,
) -> Result<Option<PushConfig>, A2aError> {
    let Some(c) = params.get("configuration").and_then(|c| {
        c.get("taskPushNotificationConfig")
            .or_else(|| c.get("pushNotificationConfig"))
            .or_else(|| c.get("push_notification_config"))
    }) else {
        return Ok(None);
    };
    let Some(policy) = &gw.push else {
        return Err(A2aError::PushNotSupported);
    };
    let mut config = config_from_params("", c)?;
    config.version = version_of(client);
    check(policy, &config.url).await?;
    Ok(Some(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_reserved_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "240.0.0.1",
            // IPv4 inside IPv6, and the relays to elsewhere.
            "::127.0.0.1",
            "::10.0.0.1",
            "::ffff:0:127.0.0.1",
            "::ffff:0:169.254.169.254",
            "64:ff9b::7f00:1",
            "64:ff9b:1::a00:1",
            "2002:7f00:1::1",
            "2002:5db8:d822::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:2::1",
            "100::1",
            "::",
        ] {
            assert!(not_public(ip.parse().expect("ip")), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "2001:4860::8888",
        ] {
            assert!(!not_public(ip.parse().expect("ip")), "{ip}");
        }
    }

    #[tokio::test]
    async fn the_guard_refuses_loopback_unless_listed_and_what_is_not_a_url() {
        let open = PushPolicy::default();
        let e = open
            .check("http://127.0.0.1:9/hook")
            .await
            .expect_err("refused");
        assert!(e.contains("a2a.push.allow"), "{e}");
        let e = open.check("ftp://example.com/").await.expect_err("refused");
        assert!(e.contains("http://"), "{e}");
        let e = open.check("http://[::1]:9/").await.expect_err("refused");
        assert!(e.contains("loopback"), "{e}");
        let listed = PushPolicy::new(&crate::config::PushSettings {
            allow: vec!["127.0.0.1".to_string()],
            ..Default::default()
        });
        let t = listed
            .check("http://127.0.0.1:9/hook")
            .await
            .expect("allowed");
        assert_eq!(
            t.map(|t| t.addr),
            Some("127.0.0.1:9".parse().expect("addr"))
        );
        // A name that does not resolve now is not refused (a delivery
        // waits for it), and not reached either.
        let later = open
            .check("http://no-such-host.invalid/")
            .await
            .expect("not refused");
        assert!(later.is_none());
    }

    #[test]
    fn configs_read_both_dialects_and_print_them_back() {
        let v10 = json!({"taskId": "t", "url": "https://h/x", "token": "tok",
                          "authentication": {"scheme": "Bearer", "credentials": "c"}});
        let c = config_from_params("t", &v10).expect("config");
        assert_eq!(c.id, "t", "the id defaults to the task's");
        assert_eq!(
            config_json(&c, Dialect::V10),
            json!({"taskId": "t", "id": "t", "url": "https://h/x",
            "token": "tok", "authentication": {"scheme": "Bearer", "credentials": "c"}})
        );
        let v03 = json!({"taskId": "t", "pushNotificationConfig": {"id": "p", "url": "https://h/x",
                          "authentication": {"schemes": ["Basic"]}}});
        let c = config_from_params("t", &v03).expect("config");
        assert_eq!(
            (c.id.as_str(), c.auth_scheme.as_deref()),
            ("p", Some("Basic"))
        );
        assert_eq!(
            config_json(&c, Dialect::V03)["pushNotificationConfig"]["authentication"],
            json!({"schemes": ["Basic"]})
        );
        assert!(
            config_from_params("t", &json!({"token": "x"})).is_err(),
            "no url"
        );
        assert!(config_from_params("t", &json!({"url": 5})).is_err());
        assert!(config_from_params("t", &json!({"url": "https://h", "token": "a\r\nb"})).is_err());
    }
}
