//! The shipped OpenAI-compatible driver against a server other than our own
//! mock: Python's `http.server` (`strict_model.py`), which reads a request
//! body by its `Content-Length` only, as many servers and proxies do.

use std::process::Stdio;

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
