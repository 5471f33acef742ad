#!/usr/bin/env python3
"""The red team: every attack of docs/security.md's rows against a release
roostd, as a new user would meet it (a config file, token files, roostctl,
plain HTTP from outside): issue 32's here, issue 53's in
red_team/second_pass.py. One line per attack: its outcome (it must fail
closed) and its control (the same request where it should succeed). Exits
0 only when no attack succeeds and every control does.

    scripts/red-team.py BIN_DIR CONFORMANCE_WASM GUESTS_DIR DRIVER_WASM

Standard library only; loopback addresses, temp dirs and free ports only;
roostd is stopped at the end whatever happens."""

import json
import os
import signal
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from red_team import common, second_pass  # noqa: E402
from red_team.common import Roostd, capsule, free_port, http, record, results, secret_file, send  # noqa: E402

BIN, CONFORMANCE, GUESTS, DRIVER = sys.argv[1:5]
common.setup(BIN, CONFORMANCE)
PULLER = os.path.join(GUESTS, "puller.wasm")
FILLER = os.path.join(GUESTS, "filler.wasm")
GLOBAL = "red-team-global-token-0123456789"
BILLING = "red-team-billing-token-0123456789"
UI_OLD = "red-team-ui-token-old-0123456789"
UI_NEW = "red-team-ui-token-new-0123456789"
ALICE = "red-team-alice-token-0123456789"
BOB = "red-team-bob-token-0123456789"
SECRET = "RED-TEAM-SECRET-5e1f"


def main(root):
    a2a, ui = free_port(), free_port()
    secrets = os.path.join(root, "secrets")
    os.makedirs(secrets)
    g = secret_file(os.path.join(secrets, "a2a.token"), GLOBAL)
    b = secret_file(os.path.join(secrets, "billing.token"), BILLING)
    u = secret_file(os.path.join(secrets, "ui.token"), UI_OLD)
    alice = secret_file(os.path.join(secrets, "alice.token"), ALICE)
    bob = secret_file(os.path.join(secrets, "bob.token"), BOB)
    app = "http://app.localhost:5173"
    servers = second_pass.Servers()
    inference, peers = servers.config(secret_file(os.path.join(secrets, "oauth.secret"), "s3cret"))
    servers.start()
    d = Roostd(root, f"""a2a_listen: 127.0.0.1:{a2a}
shutdown_grace_secs: 5
a2a:
  token_file: {g}
  routes:
    billing: {{token_file: {b}}}
    shared: {{clients: {{alice: {{token_file: {alice}}}, bob: {{token_file: {bob}}}}}}}
  cors: {{allow_origins: ["{app}"]}}
  push: {{allow: [127.0.0.1], max_configs_per_task: 10}}
{peers}ui: {{listen: "127.0.0.1:{ui}", token_file: {u}}}
http: {{max_connections: 16, max_connections_per_client: 8, header_read_timeout_secs: 2,
        body_read_timeout_secs: 2, max_streams_per_route: 2}}
{inference}""", env={"RED_TEAM_MODEL_KEY": second_pass.MODEL_KEY,
                     "RED_TEAM_CLOUD_SECRET": second_pass.CLOUD_SECRET})
    try:
        attacks(d, root, a2a, ui, app, u)
        second_pass.attacks(d, root, a2a, (GLOBAL, BILLING), GUESTS,
                            (DRIVER, os.path.join(os.path.dirname(__file__), "..", "examples", "artifacts",
                                                  "openai-driver")), servers)
    finally:
        d.stop()
        servers.stop()
        if os.environ.get("RED_TEAM_LOG"):
            print(d.read_log())
    assert SECRET not in d.read_log(), "the secret reached roostd's log"
    assert second_pass.CLOUD_SECRET not in d.read_log(), "roostd's variable reached its log"


def attacks(d, root, a2a, ui, app, ui_token):
    for name in ["billing", "other", "shared"]:
        r = d.ctl("start", capsule(root, name), "--name", name)
        assert r.returncode == 0, r.stderr
    gl, own = {"Authorization": f"Bearer {GLOBAL}"}, {"Authorization": f"Bearer {BILLING}"}
    n = iter(range(1_000_000))

    # A route's token, sidestepped by spelling the route differently.
    for spelled in ["bill%69ng", "bill%69ng/", "%62illing"]:
        s1, _, _ = send(a2a, spelled, f"rt-{next(n)}")
        s2, _, _ = send(a2a, spelled, f"rt-{next(n)}", gl)
        s3, _, _ = send(a2a, spelled, f"rt-{next(n)}", own)
        record(f"route token by spelling /a2a/{spelled} (none, roostd's)", s1 == 401 and s2 == 401,
               f"{s1}, {s2}", s3 == 200, f"its own token: {s3}")
    s1, _, _ = send(a2a, "Bill%69ng", "rt-case", own)
    s2, _, _ = send(a2a, "billing", "rt-plain", own)
    record("route that decodes to no name (Bill%69ng)", s1 == 404, str(s1), s2 == 200, str(s2))

    # One client of a route reading or continuing another's tasks.
    ah, bh = {"Authorization": f"Bearer {ALICE}"}, {"Authorization": f"Bearer {BOB}"}
    _, _, out = send(a2a, "shared", "alice-1", ah)
    task = json.loads(out)["result"]["task"]["id"]

    def rpc(headers, method, params):
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
        h = {"A2A-Version": "1.0", "Content-Type": "application/json", **headers}
        return json.loads(http(a2a, "POST", "/a2a/shared", h, body)[2])
    bobs = rpc(bh, "GetTask", {"id": task})
    alices = rpc(ah, "GetTask", {"id": task})
    record("another client's task (GetTask)", bobs.get("error", {}).get("code") == -32001,
           str(bobs.get("error", {}).get("code")), alices.get("result", {}).get("id") == task,
           "its owner reads it")
    joined = rpc(bh, "SendMessage", {"message": {"messageId": "bob-1", "role": "ROLE_USER",
             "parts": [{"text": "x"}], "contextId": json.loads(out)["result"]["task"]["contextId"]}})
    listed = rpc(bh, "ListTasks", {})
    record("another client's context, and its tasks in a list",
           "error" in joined and all(t["id"] != task for t in listed["result"]["tasks"]),
           f"join: {joined.get('error', {}).get('code')}, listed: {len(listed['result']['tasks'])}",
           any(t["id"] == task for t in rpc(ah, "ListTasks", {})["result"]["tasks"]),
           "its owner lists it")

    # A web page driving a loopback agent.
    s1, _, _ = send(a2a, "other", "web-1", {**gl, "Origin": "http://evil.example"})
    s2, h2, _ = send(a2a, "other", "web-2", {**gl, "Origin": app})
    record("cross-origin POST from a web page", s1 == 403, str(s1),
           s2 == 200 and f"access-control-allow-origin: {app}" in h2, f"listed origin {s2}")
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "web-3", "role": "ROLE_USER", "parts": [{"text": "x"}]}}}).encode()
    s1, _, _ = http(a2a, "POST", "/a2a/other", {**gl, "Content-Type": "text/plain"}, body)
    s2, _, _ = send(a2a, "other", "web-4", gl)
    record("no-preflight POST (text/plain body)", s1 == 415, str(s1), s2 == 200, str(s2))
    s1, _, _ = send(a2a, "other", "web-5", gl, host=f"attacker.example:{a2a}")
    s2, _, _ = send(a2a, "other", "web-6", gl, host=f"localhost:{a2a}")
    record("DNS rebinding (Host: attacker.example)", s1 == 421, str(s1), s2 == 200, str(s2))
    s1, _, _ = http(ui, "GET", "/login", host=f"attacker.example:{ui}")
    s2, _, _ = http(ui, "GET", "/login")
    record("DNS rebinding on the dashboard", s1 == 421, str(s1), s2 == 200, str(s2))

    # A manifest reading files outside its capsule.
    secret = secret_file(os.path.join(root, "secret.md"), SECRET)
    skill = "artifacts:\n  - {{name: notes, version: local, runtime: skill, source: \"{}\"}}\ntools: [notes]\n"
    up = d.ctl("start", capsule(root, "up", skill.format("../secret.md")))
    linked_dir = capsule(root, "linked", skill.format("notes.md"))
    os.symlink(secret, os.path.join(linked_dir, "notes.md"))
    linked = d.ctl("start", linked_dir)
    plain_dir = capsule(root, "plain", skill.format("notes.md"))
    with open(os.path.join(plain_dir, "notes.md"), "w") as f:
        f.write("ordinary notes\n")
    plain = d.ctl("start", plain_dir)
    record("skill source ../secret.md", up.returncode != 0 and SECRET not in up.stderr,
           up.stderr.strip().splitlines()[-1][:90], plain.returncode == 0, "a file inside starts")
    record("skill source a symlink to a secret", linked.returncode != 0 and SECRET not in linked.stderr,
           "symlink" if "symlink" in linked.stderr else linked.stderr.strip()[:90],
           plain.returncode == 0, "a file inside starts")

    # Filesystem grants of roostd's own state and of system trees.
    grant = "capabilities: {{filesystem: {{read_write: [\"{}\"]}}}}\n"
    data = os.path.join(root, "data")
    os.makedirs(data)
    for what, path in [("the state dir", d.state), ("a token file", ui_token), ("/", "/"),
                       ("/etc", "/etc")]:
        r = d.ctl("start", capsule(root, f"grant-{next(n)}", grant.format(path)))
        c = d.ctl("start", capsule(root, f"grant-{next(n)}", grant.format(data)))
        record(f"filesystem grant of {what}", r.returncode != 0 and "overlaps" in r.stderr,
               "refused" if r.returncode else "started", c.returncode == 0, "a data dir starts")

    # A native tool pulled into a session staged WASM-only.
    tool = os.path.join(root, "envdump")
    os.makedirs(tool)
    with open(os.path.join(tool, "murmur.yaml"), "w") as f:
        f.write("name: envdump\nversion: 1.0.0\nruntime: tool\nimplementation: native\ndescription: x\n")
    with open(os.path.join(tool, "envdump"), "w") as f:
        f.write("#!/bin/sh\necho \"input=$(cat)\"\n")
    os.chmod(os.path.join(tool, "envdump"), 0o755)
    pub = d.ctl("publish", tool, "--registry", os.path.join(d.state, "registry"))
    assert pub.returncode == 0, pub.stderr
    said = {}
    for kind, extra in [("wasm", ""), ("native", "capabilities: {shell: {allow: [sh]}}\n")]:
        pd = capsule(root, f"pull-{kind}", f"tools: [envdump]\n{extra}", wasm=PULLER, lifecycle=False)
        with open(os.path.join(pd, "pull.txt"), "w") as f:
            f.write("envdump 1.0.0")
        d.ctl("start", pd, "--workdir", pd, "--wait")
        with open(os.path.join(pd, "pulled.txt")) as f:
            said[kind] = f.read()
    record("native tool pulled into a WASM-only session", said["wasm"].startswith("error:"),
           said["wasm"][:70], said["native"].startswith("ok: input="),
           f"staged native: {said['native'][:90]}")

    # A WASM guest growing its files (a write, streams, set-size, std) past
    # the capsule's largest-file limit; the control runs under the default.
    fills, largest = {}, {}
    for kind, extra in [("bounded", "capabilities: {limits: {output_bytes: 1048576}}\n"), ("default", "")]:
        fd = capsule(root, f"fill-{kind}", extra, wasm=FILLER, lifecycle=False)
        with open(os.path.join(fd, "fill-size.txt"), "w") as f:
            f.write(str(2 << 20))
        d.ctl("start", fd, "--workdir", fd, "--wait")
        with open(os.path.join(fd, "fill.json")) as f:
            fills[kind] = json.load(f)
        largest[kind] = max(os.path.getsize(os.path.join(fd, n)) for n in
                            ["write.bin", "stream.bin", "append.bin", "set-size.bin", "std.bin"])
    record("a WASM guest grows its files to 2 MiB past a 1 MiB limit",
           all(v != "ok" for v in fills["bounded"].values()) and largest["bounded"] <= 1 << 20,
           f"largest {largest['bounded']} bytes, write: {fills['bounded']['write']}",
           all(v == "ok" for v in fills["default"].values()) and largest["default"] == 2 << 20,
           f"default limit: largest {largest['default']} bytes")

    # Holding connections: heads never finished (8 from each of two
    # addresses, a client's share), and one more than the limit.
    held = []
    for ip in ["127.0.0.1"] * 8 + ["127.0.0.2"] * 8:
        s = second_pass.connect_from(ip, a2a)
        s.sendall(b"POST /a2a/other HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        held.append(s)
    time.sleep(0.3)
    extra = second_pass.connect_from("127.0.0.3", a2a)
    extra.settimeout(2)
    try:
        closed_at_once = extra.recv(1) == b""
    except (socket.timeout, ConnectionResetError):
        closed_at_once = False
    extra.close()
    time.sleep(3)
    freed = 0
    for s in held:
        s.settimeout(3)
        try:
            s.recv(4096)  # closed (or answered, then closed) by roostd
            freed += 1
        except ConnectionResetError:
            freed += 1
        except socket.timeout:
            pass
        s.close()
    s2, _, _ = http(a2a, "GET", "/healthz")
    record("slow heads and one connection past the limit", closed_at_once and freed == 16,
           f"extra closed: {closed_at_once}, slow ones closed: {freed}/16", s2 == 200,
           f"a request afterwards: {s2}")

    # Push configs as an amplifier, and the SSRF guard.
    s, _, b = send(a2a, "other", "push-task", gl)
    task = json.loads(b)["result"]["task"]["id"]

    def config(cid, url):
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig",
                           "params": {"taskId": task, "id": cid, "url": url}}).encode()
        _, _, out = http(a2a, "POST", "/a2a/other",
                         {**gl, "A2A-Version": "1.0", "Content-Type": "application/json"}, body)
        return json.loads(out)
    made = [config(f"c{i}", "http://127.0.0.1:9/hook") for i in range(10)]
    eleventh = config("c10", "http://127.0.0.1:9/hook")
    record("an 11th push config on one task", "error" in eleventh,
           eleventh.get("error", {}).get("message", "")[:60],
           all("result" in m for m in made), "10 accepted")
    for url in ["http://[::127.0.0.1]:9/", "http://[::ffff:0:127.0.0.1]:9/", "http://[64:ff9b:1::a00:1]/",
                "http://[2002:7f00:1::1]/"]:
        bad = config(f"ssrf-{next(n)}", url)
        record(f"push URL {url}", "error" in bad, bad.get("error", {}).get("message", "")[:50],
               "result" in config("c0", "http://127.0.0.1:9/hook"), "an allowed host is accepted")

    # A dashboard login outliving a rotated token.
    login = json.dumps({"token": UI_OLD}).encode()
    _, head, _ = http(ui, "POST", "/login", {"Content-Type": "application/json"}, login)
    cookie = [l.split(":", 1)[1].strip().split(";")[0] for l in head.split("\n") if l.startswith("set-cookie")][0]
    before, _, _ = http(ui, "GET", "/", {"Cookie": cookie})
    secret_file(ui_token, UI_NEW)
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.time() + 20
    while "configuration reloaded" not in d.read_log() and time.time() < deadline:
        time.sleep(0.1)
    after, _, _ = http(ui, "GET", "/", {"Cookie": cookie})
    _, head, _ = http(ui, "POST", "/login", {"Content-Type": "application/json"},
                      json.dumps({"token": UI_NEW}).encode())
    fresh = [l.split(":", 1)[1].strip().split(";")[0] for l in head.split("\n") if l.startswith("set-cookie")]
    control, _, _ = http(ui, "GET", "/", {"Cookie": fresh[0]}) if fresh else (0, "", "")
    record("a dashboard login after its token was rotated", before == 200 and after in (302, 303),
           f"before {before}, after {after}", control == 200, f"a new login: {control}")

    # Streams held open on one route, one past its limit (2 here).
    def ask(route, headers, mid):
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": "ask"}]}}}).encode()
        h = {"A2A-Version": "1.0", "Content-Type": "application/json", **headers}
        return json.loads(http(a2a, "POST", f"/a2a/{route}", h, body)[2])["result"]["task"]["id"]

    def subscribe(route, headers, task):
        s = socket.create_connection(("127.0.0.1", a2a), timeout=20)
        head = (f"POST /a2a/{route}/tasks/{task}:subscribe HTTP/1.1\r\nHost: 127.0.0.1:{a2a}\r\n"
                "A2A-Version: 1.0\r\nContent-Length: 0\r\n")
        s.sendall((head + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode())
        got = b""
        while b"data:" not in got and b"max_streams_per_route" not in got:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        return s, got.decode(errors="replace")
    waiting = ask("other", gl, "streams-other")
    opened = [subscribe("other", gl, waiting) for _ in range(3)]
    elsewhere = subscribe("billing", own, ask("billing", own, "streams-billing"))
    for s, _ in opened + [elsewhere]:
        s.close()
    said = [x.split("\r\n", 1)[0] for _, x in opened]
    record("a third stream on a route with two slots",
           said[:2] == ["HTTP/1.1 200 OK"] * 2 and "max_streams_per_route" in opened[2][1],
           f"{said[2]}", elsewhere[1].startswith("HTTP/1.1 200"),
           f"another route's stream: {elsewhere[1].split(chr(13), 1)[0]}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="roost-red-team-") as root:
        # As a user's directory is: others may pass through it (a root
        # roostd's tools run as an unprivileged uid and reach their workdir
        # through it); the secrets inside are 0600.
        os.chmod(root, 0o755)
        main(root)
    failed = sum(1 for a, c in results if not (a and c))
    print(f"{len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
