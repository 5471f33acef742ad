//! The web dashboard in a real browser: Debian's headless Chromium driven
//! over WebDriver (`chromedriver`, plain HTTP/JSON). Log in with the token
//! from `ui.token_file`, watch a session started through roostctl appear
//! without a reload, follow it to its running task, cancel the task, stop
//! the session; a screenshot is saved (`target/dashboard.png`). Then the
//! list with 1,000 sessions: how long the browser takes to render it is
//! printed (not asserted).
//!
//! `scripts/test` installs the browser (`scripts/browser`) and sets
//! `ROOST_REQUIRE_BROWSER=1`, so there a missing browser fails the test; a
//! plain `cargo test` without one says so and skips it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::a2a::{JSON, V1, http};
use crate::agents::{KEY, agent, publish_agent_artifacts};
use crate::harness::{Daemon, capsule, free_port, repo, request};
use crate::mock_llm::{MockLlm, Reply};

const TOKEN: &str = "dashboard-token-0123456789";

pub(crate) fn browser() -> Option<(PathBuf, PathBuf)> {
    let find = |names: &[&str]| {
        names
            .iter()
            .map(|n| Path::new("/usr/bin").join(n))
            .find(|p| p.is_file())
    };
    Some((
        find(&["chromedriver"])?,
        find(&["chromium", "chromium-browser"])?,
    ))
}

/// chromedriver on a free loopback port, killed on drop.
pub(crate) struct Driver {
    child: Child,
    addr: String,
    session: String,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    pub(crate) async fn start(driver: &Path, chromium: &Path) -> Self {
        let port = free_port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver");
        let profile = tempfile::tempdir().expect("profile");
        let mut d = Self {
            child,
            addr: format!("127.0.0.1:{port}"),
            session: String::new(),
            _profile: profile,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(&d.addr).await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium.display().to_string(),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1000",
                         format!("--user-data-dir={}", d._profile.path().display())],
            },
        }}});
        let v = d.call("POST", "/session", Some(caps)).await;
        d.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_string();
        d
    }

    /// One WebDriver command; its `value`. (chromedriver keeps
    /// connections open whatever the request says: the answer is read by
    /// its Content-Length.)
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let stream = tokio::net::TcpStream::connect(&self.addr)
            .await
            .expect("connect");
        let mut stream = tokio::io::BufReader::new(stream);
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        stream
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .expect("write");
        let (mut status, mut length) = (0u16, 0usize);
        loop {
            let mut line = String::new();
            stream.read_line(&mut line).await.expect("read");
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if line.starts_with("HTTP/") {
                status = line
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
            } else if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut raw = vec![0; length];
        stream.read_exact(&mut raw).await.expect("body");
        let v: Value = serde_json::from_slice(&raw)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&raw)));
        assert_eq!(status, 200, "{method} {path}: {v}");
        v["value"].clone()
    }

    async fn cmd(&self, method: &str, what: &str, body: Option<Value>) -> Value {
        self.call(method, &format!("/session/{}{what}", self.session), body)
            .await
    }

    pub(crate) async fn go(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({"url": url}))).await;
    }

    pub(crate) async fn script(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Waits until `script` (a `return …` expression) is true.
    async fn until(&self, what: &str, script: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.script(script).await == json!(true) {
                return;
            }
            if Instant::now() > deadline {
                let html = self.script("return document.body.innerText").await;
                panic!("waited 30 s for {what}; the page shows:\n{html}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn element(&self, css: &str) -> String {
        let v = self
            .cmd(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {v}"))
            .to_string()
    }

    async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.cmd("POST", &format!("/element/{id}/click"), Some(json!({})))
            .await;
    }

    async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.cmd(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    async fn screenshot(&self, to: &Path) {
        use base64::Engine;
        let v = self.cmd("GET", "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64"))
            .expect("png");
        std::fs::write(to, png).expect("write screenshot");
    }

    pub(crate) async fn quit(&self) {
        self.call("DELETE", &format!("/session/{}", self.session), None)
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_session_live_and_cancels_its_task_and_stops_it() {
    let Some((chromedriver, chromium)) = browser() else {
        assert!(
            std::env::var_os("ROOST_REQUIRE_BROWSER").is_none(),
            "no chromium/chromedriver: install them with scripts/browser"
        );
        eprintln!("skipped: no headless Chromium (scripts/browser installs it; scripts/test does)");
        return;
    };
    // The model thinks long about the second task: it stays working.
    let mock = MockLlm::start(|seen| {
        let text = seen.messages()[0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if text.contains("slow") {
            Reply::text("late").delay(Duration::from_secs(60))
        } else {
            Reply::text("quick answer").usage(12, 3)
        }
    })
    .await;
    let ui_port = free_port();
    let root = tempfile::tempdir().expect("tempdir");
    let token_file = root.path().join("ui.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token");
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod");
    let daemon = Daemon::start_with(
        &format!(
            "{}ui: {{listen: \"127.0.0.1:{ui_port}\", token_file: \"{}\"}}\n",
            crate::harness::AGENT_CONFIG,
            token_file.display()
        ),
        &[("ROOST_E2E_KEY", KEY)],
    )
    .await;
    publish_agent_artifacts(&daemon).await;
    let base = format!("http://127.0.0.1:{ui_port}");
    let driver = Driver::start(&chromedriver, &chromium).await;

    // Without a login: the login page. A wrong token is refused.
    driver.go(&format!("{base}/")).await;
    driver
        .until(
            "the login page",
            "return !!document.getElementById('token')",
        )
        .await;
    driver.type_into("#token", "not-the-token-at-all").await;
    driver.click("#login button").await;
    driver
        .until(
            "the refusal",
            "return document.getElementById('login-error').textContent.includes('wrong token')",
        )
        .await;
    driver.go(&format!("{base}/login")).await;
    driver
        .until(
            "the login page",
            "return !!document.getElementById('token')",
        )
        .await;
    driver.type_into("#token", TOKEN).await;
    driver.click("#login button").await;
    driver
        .until(
            "the session list",
            "return !!document.getElementById('sessions')",
        )
        .await;
    // The cookie is not for scripts.
    assert_eq!(driver.script("return document.cookie").await, json!(""));

    // A session started through roostctl appears without a reload.
    driver
        .script("window.notReloaded = true; return true")
        .await;
    let dir = agent(
        daemon.root.path(),
        "dash",
        &mock,
        "",
        "lifecycle: {task_acceptance: queue, after_task: sleep}\n",
    );
    let roostctl = Path::new(env!("CARGO_BIN_EXE_roostd")).with_file_name("roostctl");
    let out = Command::new(&roostctl)
        .arg("--socket")
        .arg(&daemon.socket)
        .args(["--json", "start"])
        .arg(&dir)
        .env_remove("ROOST_SOCKET")
        .output()
        .expect("roostctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let session: Value = serde_json::from_slice(&out.stdout).expect("session json");
    let id = session["id"].as_str().expect("id").to_string();
    driver
        .until(
            "the new session's row, running",
            &format!(
                "return window.notReloaded === true && !!document.querySelector(\
                 'tr[data-session=\"{id}\"][data-state=\"running\"]')"
            ),
        )
        .await;

    // Its page: a task sent to it shows up live; open it.
    driver.click(&format!("tr[data-session=\"{id}\"] a")).await;
    driver
        .until(
            "the session page",
            "return !!document.getElementById('stop')",
        )
        .await;
    // The route's schedules are on its page, live.
    let nightly = daemon
        .client
        .add_schedule(&roost_ctl::api::ScheduleRequest {
            route: "dash".into(),
            text: "the nightly summary".into(),
            times: roost_ctl::api::ScheduleTimes {
                cron: Some("0 2 * * *".into()),
                tz: Some("Europe/Berlin".into()),
                ..Default::default()
            },
            name: Some("nightly".into()),
            ..Default::default()
        })
        .await
        .expect("schedule");
    driver
        .until(
            "the route's schedule and the session's version on the session page",
            &format!(
                "const row = document.querySelector('tr[data-schedule=\"{}\"]'); \
                 return !!row && row.textContent.includes('cron 0 2 * * * (Europe/Berlin)') \
                 && !!document.querySelector('#versions tr[data-version]')",
                nightly.id
            ),
        )
        .await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let quick = send(&addr, "dash", "quick one", false).await;
    assert_eq!(quick["status"]["state"], "TASK_STATE_COMPLETED", "{quick}");
    let slow = send(&addr, "dash", "slow one", true).await;
    let task_id = slow["id"].as_str().expect("task id").to_string();
    driver
        .until(
            "the working task on the session page",
            &format!("return !!document.querySelector('tr[data-task=\"{task_id}\"]')"),
        )
        .await;
    driver
        .until(
            "the agent's trace with its tokens",
            "return document.getElementById('trace').textContent.includes('12 in / 3 out')",
        )
        .await;
    driver
        .click(&format!("tr[data-task=\"{task_id}\"] a"))
        .await;
    driver
        .until(
            "the task page, working",
            "return !!document.getElementById('cancel') && \
             document.querySelector('h1 .badge').textContent === 'working'",
        )
        .await;
    driver.click("#cancel").await;
    driver
        .until(
            "the task canceled, in its timeline",
            "return document.querySelector('h1 .badge').textContent === 'canceled' && \
             document.getElementById('timeline').textContent.includes('canceled')",
        )
        .await;
    let task = daemon_task(&addr, &task_id).await;
    assert_eq!(task["status"]["state"], "TASK_STATE_CANCELED", "{task}");

    // Back to the session: stop it.
    driver.go(&format!("{base}/s/{id}")).await;
    driver
        .until(
            "the session page",
            "return !!document.getElementById('stop')",
        )
        .await;
    let shot = repo().join("target/dashboard.png");
    driver.screenshot(&shot).await;
    driver.click("#stop").await;
    driver
        .until(
            "the session stopped",
            "return document.querySelector('h1 .badge').textContent === 'stopped'",
        )
        .await;
    let stopped = daemon.client.get(&id).await.expect("get");
    assert_eq!(stopped.state.as_str(), "stopped");
    println!("dashboard screenshot: {}", shot.display());

    // An action without the page's CSRF token is refused, with the cookie.
    let refused = driver
        .script(&format!(
            "const r = new XMLHttpRequest(); r.open('POST', '/act/s/{id}/restart', false); \
             r.send(); return r.status"
        ))
        .await;
    assert_eq!(refused, json!(403));

    // 1,000 sessions: how long until the list is on screen.
    let hello = capsule(root.path(), "hello", "hello", "");
    for _ in 0..999 {
        daemon.client.start(&request(&hello)).await.expect("start");
    }
    driver.go(&format!("{base}/")).await;
    driver
        .until(
            "the list of 1,000",
            "return !!window.roostFirstRender && window.roostFirstRender.rows >= 1000",
        )
        .await;
    let timing = driver.script("return window.roostFirstRender").await;
    println!(
        "dashboard: 1,000 sessions on screen {:.0} ms after navigation (rendering the rows {:.0} ms)",
        timing["at"].as_f64().unwrap_or(f64::NAN),
        timing["renderMs"].as_f64().unwrap_or(f64::NAN)
    );
    driver.quit().await;
}

/// Sends a message; with `background`, returns at once (the task as
/// accepted) instead of waiting for it to end.
async fn send(addr: &str, route: &str, text: &str, background: bool) -> Value {
    let mut params = json!({"message": {"messageId": format!("m-{text}"), "role": "ROLE_USER",
        "parts": [{"text": text}]}});
    if background {
        params["configuration"] = json!({"returnImmediately": true});
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params});
    let (status, _, text) = http(
        addr,
        "POST",
        &format!("/a2a/{route}"),
        &[JSON, V1],
        &body.to_string(),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).expect("json");
    v["result"]["task"].clone()
}

async fn daemon_task(addr: &str, id: &str) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}});
    let (_, _, text) = http(addr, "POST", "/a2a/dash", &[JSON, V1], &body.to_string()).await;
    serde_json::from_str::<Value>(&text).expect("json")["result"].clone()
}
