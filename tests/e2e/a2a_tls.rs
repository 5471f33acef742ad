//! The gateway over TLS (`a2a.tls`) and what roostd presents to peers
//! (`a2a.peers`): two roostd's call each other over HTTPS with a CA the
//! test makes — mutual TLS and an API key, on each binding — and the
//! controls that show each rule holds: a peer whose CA roostd was not
//! given is an unknown issuer; a client without a certificate is refused by
//! a gateway that requires one; SIGHUP serves a renewed certificate to new
//! connections while an open one keeps working. An API key goes in the
//! header the peer's card names and an OAuth 2 token is fetched once and
//! reused, only to the peer they are configured for.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::a2a_peer2::{relay_at, said};
use crate::harness::{Daemon, TEST_CONFIG, capsule, conformance, free_port, request};

const SERVE: &str = "{task_acceptance: queue, after_task: sleep, queue_depth: 64, concurrency: 16}";

/// A CA made for one test, and the files it issues.
struct Pki {
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
    pem: String,
}

impl Pki {
    fn new() -> Self {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).expect("CA");
        let pem = cert.pem();
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("ca.pem"), &pem).expect("CA file");
        Self {
            dir,
            ca: cert,
            ca_key: key,
            pem,
        }
    }

    fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A certificate for `names` (a server's, or with `client` a client's)
    /// written as `<file>.pem` and `<file>.key` (mode 600); its DER.
    fn issue(&self, file: &str, names: &[&str], client: bool) -> (PathBuf, PathBuf, Vec<u8>) {
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        params.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        let cert = params
            .signed_by(&key, &self.ca, &self.ca_key)
            .expect("certificate");
        let (cert_file, key_file) = (
            self.dir.path().join(format!("{file}.pem")),
            self.dir.path().join(format!("{file}.key")),
        );
        std::fs::write(&cert_file, cert.pem()).expect("cert");
        std::fs::write(&key_file, key.serialize_pem()).expect("key");
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        (cert_file, key_file, cert.der().to_vec())
    }
}

fn secret(dir: &Path, name: &str, value: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, value).expect("secret");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

/// The relay's task for one call it is told to make.
async fn relay(addr: &str, lines: &str) -> Value {
    relay_at(addr, "relay", lines, &[]).await
}

fn answer_text(task: &Value) -> String {
    task["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["artifactId"] == "answer")
        .flat_map(|a| a["parts"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["text"].as_str().map(str::to_string))
        .collect()
}

/// A TLS client of the test's own: trusts `ca`, presents `identity` if
/// given; answers the server's certificate and the stream.
async fn tls_connect(
    port: u16,
    ca: &str,
    identity: Option<(&Path, &Path)>,
) -> std::io::Result<(
    Vec<u8>,
    tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
)> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.expect("CA pem")).expect("root");
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                rustls::pki_types::CertificateDer::pem_file_iter(cert)
                    .expect("cert")
                    .collect::<Result<Vec<_>, _>>()
                    .expect("cert"),
                rustls::pki_types::PrivateKeyDer::from_pem_file(key).expect("key"),
            )
            .expect("client config"),
    };
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?;
    let presented = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    Ok((presented, stream))
}

/// One keep-alive GET of the route's card on `stream`: its status line.
async fn get_card<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    stream: &mut S,
) -> std::io::Result<String> {
    let request =
        b"GET /a2a/conformance/.well-known/agent-card.json HTTP/1.1\r\nHost: localhost\r\n\r\n";
    Ok(exchange_on(stream, request).await?.0)
}

/// One request on a kept-alive `stream`: the answer's status line and body.
async fn exchange_on<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    stream: &mut S,
    request: &[u8],
) -> std::io::Result<(String, String)> {
    stream.write_all(request).await?;
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    // The head, then as many body bytes as it says.
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if body.len() >= length {
                let status = head.lines().next().unwrap_or_default().to_string();
                return Ok((status, body.to_string()));
            }
        }
    }
}

/// One JSON-RPC `SendMessage` of `text` to `route` over TLS (`identity`,
/// `token` as the gateway asks): the task it answers.
async fn send_tls(
    port: u16,
    pki: &Pki,
    identity: Option<(&Path, &Path)>,
    token: Option<&str>,
    route: &str,
    text: &str,
) -> Value {
    let message = json!({"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
        "parts": [{"text": text}]});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": message}})
    .to_string();
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    let head = format!(
        "POST /a2a/{route} HTTP/1.1\r\nHost: localhost\r\nA2A-Version: 1.0\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n{auth}\r\n",
        body.len()
    );
    let (_, mut stream) = tls_connect(port, &pki.pem, identity)
        .await
        .expect("connect");
    let (status, answer) = exchange_on(&mut stream, format!("{head}{body}").as_bytes())
        .await
        .expect("answer");
    assert_eq!(status, "HTTP/1.1 200 OK", "{answer}");
    let answer: Value = serde_json::from_str(&answer).expect("JSON");
    answer["result"]["task"].clone()
}

/// A relay capsule that may reach `peers` (https origins).
fn relay_capsule(daemon: &Daemon, name: &str, peers: &[String]) -> PathBuf {
    let allow = peers
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(", ");
    capsule(
        daemon.root.path(),
        name,
        "relay",
        &format!("lifecycle: {SERVE}\ncapabilities:\n  network:\n    allow: [{allow}]\n"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_roostds_call_each_other_over_https_with_mutual_tls() {
    let pki = Pki::new();
    let (b_cert, b_key, b_der) = pki.issue("b", &["localhost", "127.0.0.1"], false);
    let (a_server_cert, a_server_key, _) = pki.issue("a-server", &["localhost"], false);
    let (a_cert, a_key, _) = pki.issue("a", &["roostd-a"], true);
    let token = "b-gateway-token-0123456789";
    let (port, a_port) = (free_port(), free_port());
    let base = "pool: {max_instances: 300, max_memory_mb: 256}\nshutdown_grace_secs: 5\n";

    // B serves HTTPS itself, asks every client for a certificate, and
    // knows A's CA.
    let b_token = secret(pki.dir.path(), "b.token", token);
    let b = Daemon::start_with(
        &format!(
            "a2a_listen: 127.0.0.1:{port}\n{base}a2a: {{public_url: 'https://localhost:{port}', \
             token_file: '{}', api_key_header: X-Roost-Key, tls: {{cert_file: '{}', key_file: \
             '{}', client_ca_file: '{}'}}, peers: [{{url: 'https://localhost:{a_port}/', ca_file: \
             '{}'}}]}}\n",
            b_token.display(),
            b_cert.display(),
            b_key.display(),
            pki.ca_file().display(),
            pki.ca_file().display(),
        ),
        &[],
    )
    .await;
    let dir = conformance(b.root.path(), "conformance", SERVE, "");
    b.client.start(&request(&dir)).await.expect("start on b");
    let b_relay = relay_capsule(&b, "relay", &[format!("https://localhost:{a_port}")]);
    b.client
        .start(&request(&b_relay))
        .await
        .expect("relay on b");

    // A serves HTTPS too. For `localhost` it has B's CA, its own client
    // certificate and B's token as an API key (sent in the header B's card
    // names, `X-Roost-Key`, not the default `X-API-Key`); for `127.0.0.1`
    // (the same B) only the token.
    let a_token = secret(pki.dir.path(), "a-to-b.token", token);
    let a = Daemon::start_with(
        &format!(
            "a2a_listen: 127.0.0.1:{a_port}\n{base}a2a: {{public_url: \
             'https://localhost:{a_port}', tls: {{cert_file: '{}', key_file: '{}'}}, peers: \
             [{{url: 'https://localhost:{port}/', api_key_file: '{}', ca_file: '{}', \
             client_cert_file: '{}', client_key_file: '{}'}}, {{url: \
             'https://127.0.0.1:{port}/', token_file: '{}'}}]}}\n",
            a_server_cert.display(),
            a_server_key.display(),
            a_token.display(),
            pki.ca_file().display(),
            a_cert.display(),
            a_key.display(),
            a_token.display(),
        ),
        &[],
    )
    .await;
    let relay_dir = relay_capsule(
        &a,
        "relay",
        &[
            format!("https://localhost:{port}"),
            format!("https://127.0.0.1:{port}"),
        ],
    );
    a.client.start(&request(&relay_dir)).await.expect("relay");
    let dir = conformance(a.root.path(), "conformance", SERVE, "");
    a.client.start(&request(&dir)).await.expect("start on a");
    let on_a = |text: String| {
        let pki = &pki;
        async move { send_tls(a_port, pki, None, None, "relay", &text).await }
    };

    // A calls B on each binding, with mutual TLS and B's token as an API
    // key.
    let card = format!("https://localhost:{port}/a2a/conformance");
    let ask = |binding: &str| format!("url={card}\nbinding={binding}\nversion=1.0\ntext=hello");
    for binding in ["jsonrpc", "http-json", "grpc"] {
        let task = on_a(ask(binding)).await;
        let what = format!("{binding}: {task}\n{}\n{}", a.log(), b.log());
        assert!(said(&task).starts_with("completed tsk_"), "{what}");
        assert_eq!(answer_text(&task), "echo: hello", "{what}");
    }
    // B calls A (B's client, A's CA; asked through B's gateway, which wants
    // a client certificate and its token).
    let back = send_tls(
        port,
        &pki,
        Some((&a_cert, &a_key)),
        Some(token),
        "relay",
        &format!("url=https://localhost:{a_port}/a2a/conformance\nbinding=jsonrpc\ntext=back"),
    )
    .await;
    assert_eq!(answer_text(&back), "echo: back", "{back}\n{}", b.log());

    // B takes its token in the header its card names, and nowhere else
    // but `Authorization`.
    for (header, value, status) in [
        ("X-Roost-Key", token, "HTTP/1.1 200 OK"),
        (
            "X-Roost-Key",
            "not-the-token-0123456789",
            "HTTP/1.1 401 Unauthorized",
        ),
        ("X-API-Key", token, "HTTP/1.1 401 Unauthorized"),
    ] {
        let (_, mut s) = tls_connect(port, &pki.pem, Some((&a_cert, &a_key)))
            .await
            .expect("connect");
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask",
            "params": {"id": "tsk_none"}})
        .to_string();
        let request = format!(
            "POST /a2a/conformance HTTP/1.1\r\nHost: localhost\r\nA2A-Version: 1.0\r\n\
             Content-Type: application/json\r\n{header}: {value}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let (got, answer) = exchange_on(&mut s, request.as_bytes())
            .await
            .expect("answer");
        assert_eq!(got, status, "{header}: {answer}");
    }

    // The control: the same B by an address whose entry has no CA: the
    // certificate's issuer is unknown and nothing is sent.
    let task = on_a(format!(
        "url=https://127.0.0.1:{port}/a2a/conformance\nbinding=jsonrpc\ntext=hello"
    ))
    .await;
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{task}");
    assert!(said(&task).contains("UnknownIssuer"), "{task}");

    // Without a client certificate, B refuses the handshake; with one it
    // answers.
    let refused = match tls_connect(port, &pki.pem, None).await {
        Err(e) => e.to_string(),
        Ok((_, mut s)) => match get_card(&mut s).await {
            Err(e) => e.to_string(),
            Ok(status) => panic!("answered without a client certificate: {status}"),
        },
    };
    assert!(
        refused.contains("CertificateRequired") || refused.contains("certificate"),
        "{refused}"
    );

    // SIGHUP: a renewed certificate at the same paths; the open connection
    // keeps working, new ones get the new certificate.
    let (_, mut open) = tls_connect(port, &pki.pem, Some((&a_cert, &a_key)))
        .await
        .expect("connect");
    assert_eq!(get_card(&mut open).await.expect("card"), "HTTP/1.1 200 OK");
    let (_, _, renewed) = pki.issue("b", &["localhost", "127.0.0.1"], false);
    assert_ne!(renewed, b_der);
    // SAFETY: kill(2) with a pid we own.
    assert_eq!(unsafe { libc::kill(b.pid() as i32, libc::SIGHUP) }, 0);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (presented, _) = tls_connect(port, &pki.pem, Some((&a_cert, &a_key)))
            .await
            .expect("connect");
        if presented == renewed {
            break;
        }
        assert_eq!(presented, b_der, "one of the two certificates");
        assert!(
            Instant::now() < deadline,
            "no new certificate:\n{}",
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        get_card(&mut open).await.expect("the open connection"),
        "HTTP/1.1 200 OK"
    );
    let task = on_a(ask("jsonrpc")).await;
    assert_eq!(
        answer_text(&task),
        "echo: hello",
        "after the renewal: {task}"
    );

    // roostd's credentials are shared by A's capsules, not their peer
    // tasks: another capsule cannot read (or cancel) the relay's task at B
    // by its id; the relay itself can (the control: the task and the call
    // are real).
    let peer_task = said(&task)
        .strip_prefix("completed ")
        .expect("the relay's answer names its peer task")
        .to_string();
    let other = relay_capsule(&a, "relay2", &[format!("https://localhost:{port}")]);
    a.client
        .start(&request(&other))
        .await
        .expect("another relay");
    for (binding, op) in [("jsonrpc", "get"), ("http-json", "cancel"), ("grpc", "get")] {
        let lines = format!("url={card}\nbinding={binding}\nop={op}\ntask={peer_task}");
        let stolen = send_tls(a_port, &pki, None, None, "relay2", &lines).await;
        assert_eq!(stolen["status"]["state"], "TASK_STATE_FAILED", "{stolen}");
        assert!(
            said(&stolen).contains("was not sent to this peer by this session"),
            "{binding}: {stolen}"
        );
        // The relay itself reads it (a cancel of its ended task would be
        // the peer's refusal, not roostd's).
        let own = on_a(format!(
            "url={card}\nbinding={binding}\nop=get\ntask={peer_task}"
        ))
        .await;
        assert_eq!(
            said(&own),
            format!("completed {peer_task}"),
            "{binding}: {own}"
        );
    }
}

/// A peer that wants an API key (its card names the header) or an OAuth 2
/// token, and says what it was sent; and the token endpoint.
#[derive(Clone, Default)]
struct KeyedPeer {
    token_calls: Arc<Mutex<Vec<String>>>,
}

async fn keyed_peer(peer: KeyedPeer) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let card = json!({
        "name": "keyed", "description": "wants a key", "version": "1",
        "supportedInterfaces": [{"url": format!("{base}/rpc"), "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0"}],
        "capabilities": {}, "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"], "skills": [],
        "securitySchemes": {"key": {"apiKeySecurityScheme":
            {"location": "header", "name": "X-Peer-Key"}}},
    });
    let app = axum::Router::new()
        .route(
            "/.well-known/agent-card.json",
            axum::routing::get(move || {
                let card = card.clone();
                async move { axum::Json(card) }
            }),
        )
        .route(
            "/token",
            axum::routing::post(
                |axum::extract::State(p): axum::extract::State<KeyedPeer>,
                 headers: HeaderMap,
                 body: String| async move {
                    let basic = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    p.token_calls
                        .lock()
                        .expect("lock")
                        .push(format!("{basic} {body}"));
                    // Expired at once, as a token server may say: roostd
                    // still keeps it its minimum lifetime.
                    axum::Json(json!({"access_token": "oauth-token-1",
                        "token_type": "Bearer", "expires_in": 0}))
                },
            ),
        )
        .route(
            "/never-token",
            axum::routing::post(std::future::pending::<String>),
        )
        .route(
            "/rpc",
            axum::routing::post(|headers: HeaderMap, body: String| async move {
                let get = |name: &str| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("none")
                        .to_string()
                };
                let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let seen = format!("key={} auth={}", get("x-peer-key"), get("authorization"));
                axum::Json(
                    json!({"jsonrpc": "2.0", "id": request["id"], "result": {"task": {
                    "id": "tsk_keyed1", "contextId": "ctx-keyed",
                    "status": {"state": "TASK_STATE_COMPLETED"},
                    "artifacts": [{"artifactId": "answer", "parts": [{"text": seen}]}]}}}),
                )
            }),
        )
        .with_state(peer);
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_and_an_oauth2_token_go_only_to_the_peer_they_are_for() {
    let (keyed, oauth, bare) = (
        KeyedPeer::default(),
        KeyedPeer::default(),
        KeyedPeer::default(),
    );
    let keyed_url = keyed_peer(keyed.clone()).await;
    let oauth_url = keyed_peer(oauth.clone()).await;
    let bare_url = keyed_peer(bare.clone()).await;
    let stalled_url = keyed_peer(KeyedPeer::default()).await;
    let secrets = tempfile::tempdir().expect("tempdir");
    let key = secret(secrets.path(), "key", "the-api-key");
    let client_secret = secret(secrets.path(), "secret", "s3cret:&");
    let daemon = Daemon::start_with(
        &format!(
            "{TEST_CONFIG}a2a: {{peers: [{{url: '{keyed_url}/', api_key_file: '{}'}}, \
             {{url: '{oauth_url}/', oauth2: {{token_url: '{oauth_url}/token', client_id: \
             client-1, client_secret_file: '{secret}', scopes: [a2a, tasks]}}}}, \
             {{url: '{stalled_url}/', oauth2: {{token_url: '{stalled_url}/never-token', client_id: \
             client-2, client_secret_file: '{secret}'}}}}]}}\n",
            key.display(),
            secret = client_secret.display(),
        ),
        &[],
    )
    .await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let allow = [&keyed_url, &oauth_url, &bare_url, &stalled_url]
        .map(|u| format!("\"{u}\""))
        .join(", ");
    let dir = capsule(
        daemon.root.path(),
        "relay",
        "relay",
        &format!("lifecycle: {SERVE}\ncapabilities:\n  network:\n    allow: [{allow}]\n"),
    );
    daemon.client.start(&request(&dir)).await.expect("relay");

    let addr = addr.as_str();
    let seen = |url: &str| {
        let lines = format!("url={url}\nbinding=jsonrpc\ntext=hello");
        async move { answer_text(&relay(addr, &lines).await) }
    };
    // The key, in the header the card names.
    assert_eq!(seen(&keyed_url).await, "key=the-api-key auth=none");
    // The token, fetched once (HTTP Basic, the scopes asked for) and
    // reused for the next calls although it said `expires_in: 0`.
    for _ in 0..3 {
        assert_eq!(seen(&oauth_url).await, "key=none auth=Bearer oauth-token-1");
    }
    let calls = oauth.token_calls.lock().expect("lock").clone();
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD.encode("client-1:s3cret%3A%26");
    assert_eq!(
        calls,
        vec![format!(
            "Basic {basic} grant_type=client_credentials&scope=a2a+tasks"
        )]
    );
    // A token URL that never answers fails its peer's call in time, and
    // holds up no other call meanwhile.
    let started = std::time::Instant::now();
    let stalled = tokio::spawn({
        let lines = format!("url={stalled_url}\nbinding=jsonrpc\ntext=hello");
        let addr = addr.to_string();
        async move { relay(&addr, &lines).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(seen(&oauth_url).await, "key=none auth=Bearer oauth-token-1");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let stalled = stalled.await.expect("join");
    assert_eq!(stalled["status"]["state"], "TASK_STATE_FAILED", "{stalled}");
    assert!(
        stalled.to_string().contains("did not answer within 10 s"),
        "{stalled}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    // The control: a peer roostd has nothing for gets nothing.
    assert_eq!(seen(&bare_url).await, "key=none auth=none");
    assert!(keyed.token_calls.lock().expect("lock").is_empty());
}
