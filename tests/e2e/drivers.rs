//! The shipped OpenAI-compatible driver against servers other than our own
//! plain mock: Python's `http.server` (`strict_model.py`), which reads a
//! request body by its `Content-Length` only, as many servers and proxies
//! do; and a model server behind TLS with an internal CA (`tls.ca_file`).

use std::process::Stdio;
use std::sync::Arc;

use roost_ctl::api::SessionState;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::agents::{agent, agent_daemon, events, run, trace, with_task};
use crate::harness::repo;
use crate::mock_llm::{MockLlm, Reply};

/// The strict server, killed when dropped.
struct Strict {
    _child: tokio::process::Child,
    port: u16,
}

impl Strict {
    async fn start() -> Self {
        let mut child = tokio::process::Command::new("python3")
            .arg(repo().join("tests/e2e/strict_model.py"))
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .await
            .expect("its port");
        let port = line.trim().parse().expect("a port");
        Self {
            _child: child,
            port,
        }
    }

    /// The status line of a request whose body is sent chunked.
    async fn chunked_status(&self) -> String {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n\
             {:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        );
        let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .expect("connect");
        socket.write_all(request.as_bytes()).await.expect("request");
        let mut answer = vec![0; 64];
        let n = socket.read(&mut answer).await.expect("answer");
        String::from_utf8_lossy(&answer[..n])
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_sends_a_body_a_strict_http_1_1_server_reads() {
    let strict = Strict::start().await;
    // The control: this server does not read a body sent chunked.
    let status = strict.chunked_status().await;
    assert!(
        status.contains(" 400 "),
        "a chunked body is refused: {status}"
    );

    let daemon = agent_daemon().await;
    let mock = MockLlm::start(|_| Reply::text("not this one")).await;
    let dir = agent(daemon.root.path(), "strict", &mock, "", "");
    let manifest = dir.join("murmur.yaml");
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    let text = text.replace(
        &format!("127.0.0.1:{}", mock.port),
        &format!("127.0.0.1:{}", strict.port),
    );
    std::fs::write(&manifest, text).expect("manifest");
    let s = run(&daemon, with_task(&dir, "Hello, strict server.")).await;
    assert_eq!(s.state, SessionState::Completed, "{s:?}\n{}", daemon.log());
    let t = trace(&daemon, &s.id).await;
    let answer = events(&t, "task_end")[0]["answer"].clone();
    // The system prompt and the user's message.
    assert_eq!(answer, "strict server read 2 messages", "{t:?}");
    assert!(mock.seen().is_empty(), "the mock was not asked");
}

/// A TLS front for `backend` (a loopback port) with a certificate for
/// `localhost` signed by a CA made here; answers its port and the CA's PEM.
async fn tls_front(backend: u16) -> (u16, String, tokio::task::JoinHandle<()>) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("CA");
    let key = KeyPair::generate().expect("server key");
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .expect("params")
        .signed_by(&key, &ca, &ca_key)
        .expect("server certificate");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if let Ok(mut plain) = tokio::net::TcpStream::connect(("127.0.0.1", backend)).await
                {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                }
            });
        }
    });
    (port, ca.pem(), task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_reaches_a_model_server_behind_the_ca_of_tls_ca_file() {
    let mock = MockLlm::start(|_| Reply::text("over TLS")).await;
    let (port, ca_pem, front) = tls_front(mock.port).await;
    let ca_dir = tempfile::tempdir().expect("tempdir");
    let ca_file = ca_dir.path().join("internal-ca.pem");
    std::fs::write(&ca_file, ca_pem).expect("CA file");
    let endpoint = format!("https://localhost:{port}/v1");
    let point_at_tls = |dir: &std::path::Path| {
        let manifest = dir.join("murmur.yaml");
        let text = std::fs::read_to_string(&manifest).expect("manifest");
        let text = text.replace(&mock.endpoint(), &endpoint).replace(
            &format!("\"http://127.0.0.1:{}\"", mock.port),
            &format!("\"https://localhost:{port}\""),
        );
        std::fs::write(&manifest, text).expect("manifest");
    };

    // The control: without the CA, the certificate is not trusted.
    let plain = agent_daemon().await;
    let dir = agent(plain.root.path(), "tls", &mock, "", "");
    point_at_tls(&dir);
    let s = run(&plain, with_task(&dir, "Hello over TLS.")).await;
    assert_eq!(s.state, SessionState::Failed, "{s:?}");
    assert!(mock.seen().is_empty(), "nothing got through");

    // With tls.ca_file, it is.
    let daemon = crate::harness::Daemon::start_with(
        &format!(
            "{}tls: {{ca_file: \"{}\"}}\n",
            crate::harness::AGENT_CONFIG,
            ca_file.display()
        ),
        &[("ROOST_E2E_KEY", crate::agents::KEY)],
    )
    .await;
    crate::agents::publish_agent_artifacts(&daemon).await;
    let dir = agent(daemon.root.path(), "tls", &mock, "", "");
    point_at_tls(&dir);
    let s = run(&daemon, with_task(&dir, "Hello over TLS.")).await;
    assert_eq!(s.state, SessionState::Completed, "{s:?}\n{}", daemon.log());
    let t = trace(&daemon, &s.id).await;
    assert_eq!(events(&t, "task_end")[0]["answer"], "over TLS");
    assert!(
        daemon.log().contains("trusting tls.ca_file"),
        "{}",
        daemon.log()
    );
    front.abort();
}

/// An HTTP proxy that takes `CONNECT` (and only that) and records each
/// request line; tunnels to the target it names.
async fn connect_proxy() -> (
    u16,
    Arc<std::sync::Mutex<Vec<String>>>,
    tokio::task::JoinHandle<()>,
) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let log = Arc::clone(&seen);
    let task = tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let line = head.lines().next().unwrap_or_default().to_string();
                log.lock().expect("log").push(line.clone());
                let Some(target) = line
                    .strip_prefix("CONNECT ")
                    .and_then(|r| r.split(' ').next())
                else {
                    let _ = client
                        .write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
                        .await;
                    return;
                };
                let Ok(mut server) = tokio::net::TcpStream::connect(target).await else {
                    let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                    return;
                };
                let _ = client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await;
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    (port, seen, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_goes_through_the_proxy_roostds_environment_names() {
    let mock = MockLlm::start(|_| Reply::text("via the proxy")).await;
    let (tls_port, ca_pem, front) = tls_front(mock.port).await;
    let (proxy_port, proxied, proxy) = connect_proxy().await;
    let ca_dir = tempfile::tempdir().expect("tempdir");
    let ca_file = ca_dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca_pem).expect("CA file");
    let config = format!(
        "{}tls: {{ca_file: \"{}\"}}\n",
        crate::harness::AGENT_CONFIG,
        ca_file.display()
    );
    let proxy_url = format!("http://127.0.0.1:{proxy_port}");
    let run_through = |no_proxy: &'static str| {
        let config = config.clone();
        let proxy_url = proxy_url.clone();
        let mock = &mock;
        async move {
            let daemon = crate::harness::Daemon::start_with(
                &config,
                &[
                    ("ROOST_E2E_KEY", crate::agents::KEY),
                    ("HTTPS_PROXY", &proxy_url),
                    ("NO_PROXY", no_proxy),
                ],
            )
            .await;
            crate::agents::publish_agent_artifacts(&daemon).await;
            let dir = agent(daemon.root.path(), "proxied", mock, "", "");
            let manifest = dir.join("murmur.yaml");
            let text = std::fs::read_to_string(&manifest)
                .expect("manifest")
                .replace(
                    &mock.endpoint(),
                    &format!("https://localhost:{tls_port}/v1"),
                )
                .replace(
                    &format!("\"http://127.0.0.1:{}\"", mock.port),
                    &format!("\"https://localhost:{tls_port}\""),
                );
            std::fs::write(&manifest, text).expect("manifest");
            let s = run(&daemon, with_task(&dir, "Through the proxy.")).await;
            assert_eq!(s.state, SessionState::Completed, "{s:?}\n{}", daemon.log());
        }
    };
    // HTTPS_PROXY: the model server is reached through a CONNECT tunnel.
    run_through("").await;
    assert_eq!(
        proxied.lock().expect("log").clone(),
        [format!("CONNECT localhost:{tls_port} HTTP/1.1")]
    );
    // NO_PROXY lists it: straight to it, the proxy sees nothing more.
    run_through("example.org,localhost").await;
    assert_eq!(proxied.lock().expect("log").len(), 1);
    front.abort();
    proxy.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_speaks_the_responses_api_and_sends_only_what_is_new() {
    let mock = MockLlm::start(|seen| {
        if seen.body.get("previous_response_id").is_none() {
            Reply::tools(&[("echo-tool", r#"{"text":"hi"}"#)]).id("resp-1")
        } else {
            Reply::text("done via responses").id("resp-2")
        }
    })
    .await;
    let daemon = agent_daemon().await;
    let dir = agent(daemon.root.path(), "respondent", &mock, "", "");
    let manifest = dir.join("murmur.yaml");
    let text = std::fs::read_to_string(&manifest)
        .expect("manifest")
        .replacen(
            "  driver: {artifact: openai-driver}\n",
            "  driver: {artifact: openai-driver, config: {api: responses}}\n",
            1,
        );
    std::fs::write(&manifest, text).expect("manifest");
    let s = run(&daemon, with_task(&dir, "Use a tool.")).await;
    assert_eq!(s.state, SessionState::Completed, "{s:?}\n{}", daemon.log());
    let t = trace(&daemon, &s.id).await;
    assert_eq!(events(&t, "task_end")[0]["answer"], "done via responses");

    let seen = mock.seen();
    assert_eq!(seen.len(), 2);
    let first = &seen[0].body;
    assert_eq!(
        first["input"],
        serde_json::json!([{"role": "user", "content": "Use a tool."}])
    );
    assert!(
        first["instructions"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{first}"
    );
    assert_eq!(first["tools"][0]["type"], "function");
    assert!(first["tools"][0]["name"].is_string(), "{first}");
    // The server keeps the conversation: the second turn sends the tool's
    // result only, after the first response.
    let second = &seen[1].body;
    assert_eq!(second["previous_response_id"], "resp-1");
    assert_eq!(
        second["input"],
        serde_json::json!([{"type": "function_call_output", "call_id": "call_0",
                            "output": "{\"text\":\"hi\"}"}])
    );
}
