"""The second pass (issue 53): the attacks of docs/security.md's rows that
landed with it, each with its control, against the same release roostd as
the first pass. Servers the attacks need (a model, a hostile peer, OAuth 2
token URLs) run in this process on loopback; their ports are chosen before
roostd starts, as its config names some of them."""

import json
import os
import shutil
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .common import capsule, free_port, http, record

MODEL_KEY = "red-team-model-key-0123456789"
CLOUD_SECRET = "red-team-cloud-secret-0123456789"
BIG = (1 << 20) - 4096


def json_reply(handler, value):
    """A 200 with `value` as JSON, from an http.server handler."""
    body = json.dumps(value).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class Servers:
    """The loopback servers: a model (Chat Completions), a hostile A2A
    peer, a peer behind OAuth 2 and its token URLs."""

    def __init__(self):
        self.model_port, self.peer_port, self.oauth_port = free_port(), free_port(), free_port()
        self.model_auth, self.token_fetches = [], {"token": 0, "never": 0}
        self.servers = []

    def config(self, secret):
        """What roostd's config says of them: the `inference:` section, and
        the `a2a.peers` entries (`secret`: the OAuth 2 client secret's file)."""
        o = f"http://127.0.0.1:{self.oauth_port}"
        inference = ("inference: {key_env_allow: [{name: RED_TEAM_MODEL_KEY, endpoints: "
                     f"[\"http://127.0.0.1:{self.model_port}/v1\"]}}]}}\n")
        peers = "".join(
            f"    - {{url: '{o}/{peer}/', oauth2: {{token_url: '{o}/{url}', client_id: red, "
            f"client_secret_file: {secret}}}}}\n"
            for peer, url in [("ok", "token"), ("stalled", "never")])
        return inference, "  peers:\n" + peers

    def start(self):
        servers = self

        class Model(BaseHTTPRequestHandler):
            def log_message(self, *_):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                servers.model_auth.append(self.headers.get("Authorization"))
                json_reply(self, {"id": "c", "object": "chat.completion", "choices": [{
                    "index": 0, "message": {"role": "assistant", "content": "answered"},
                    "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                                         "total_tokens": 2}})

        class Peer(BaseHTTPRequestHandler):
            """`/big`: artifact after artifact of a MiB under new ids;
            `/longid`: a task with a 1 KiB id; `/few`: three small ones."""
            protocol_version = "HTTP/1.1"

            def log_message(self, *_):
                pass

            def do_GET(self):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                tid = "t" * 1024 if self.path == "/longid" else "t-1"

                def event(result):
                    line = json.dumps({"jsonrpc": "2.0", "id": 1, "result": result})
                    self.wfile.write(f"data: {line}\n\n".encode())

                def artifact(aid, text):
                    event({"artifactUpdate": {"taskId": tid, "contextId": "c", "artifact": {
                        "artifactId": aid, "parts": [{"text": text}]}}})
                try:
                    event({"task": {"id": tid, "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}})
                    if self.path == "/big":
                        big = "x" * BIG
                        for i in range(400):
                            artifact(f"a{i}", big)
                    else:
                        for i in range(3):
                            artifact(f"f{i}", f"few{i} ")
                    event({"statusUpdate": {"taskId": tid, "contextId": "c",
                                            "status": {"state": "TASK_STATE_COMPLETED"}}})
                except (BrokenPipeError, ConnectionResetError):
                    pass

        class OAuth(BaseHTTPRequestHandler):
            """`/token` (`expires_in: 0`), `/never` (no answer), and the
            peers `/ok/` and `/stalled/`, which answer a JSON-RPC send with
            the bearer they were given."""

            def log_message(self, *_):
                pass

            def do_GET(self):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                request = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/token":
                    servers.token_fetches["token"] += 1
                    return json_reply(self, {"access_token": "oauth-1", "token_type": "Bearer", "expires_in": 0})
                if self.path == "/never":
                    servers.token_fetches["never"] += 1
                    time.sleep(60)
                    return
                rid = json.loads(request or b"{}").get("id", 1)
                json_reply(self, {"jsonrpc": "2.0", "id": rid, "result": {"task": {
                    "id": "tsk-1", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"},
                    "artifacts": [{"artifactId": "answer", "parts": [
                        {"text": self.headers.get("Authorization", "none")}]}]}}})

        for port, handler in [(self.model_port, Model), (self.peer_port, Peer), (self.oauth_port, OAuth)]:
            server = ThreadingHTTPServer(("127.0.0.1", port), handler)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)

    def stop(self):
        for server in self.servers:
            server.shutdown()


def rpc(a2a, route, token, method, params):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    h = {"A2A-Version": "1.0", "Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    return json.loads(http(a2a, "POST", f"/a2a/{route}", h, body)[2] or "{}")


def task_of(a2a, route, token, mid, text):
    """A blocking send's task: its state, and its answer or status message."""
    t = rpc(a2a, route, token, "SendMessage", {"message": {
        "messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}]}}).get("result", {}).get("task", {})
    said = (t.get("artifacts") or [{}])[0].get("parts", [{}])[0].get("text") or \
        t.get("status", {}).get("message", {}).get("parts", [{}])[0].get("text", "")
    return t.get("status", {}).get("state", ""), said


def accepted(a2a, route, token, mid):
    """Whether a send that returns at once (`returnImmediately`) is taken."""
    r = rpc(a2a, route, token, "SendMessage", {"message": {
        "messageId": mid, "role": "ROLE_USER", "parts": [{"text": "hi"}]},
        "configuration": {"returnImmediately": True}})
    return bool(r.get("result", {}).get("task", {}).get("id"))


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(l for l in f if l.startswith("VmHWM:")).split()[1])


def connect_from(ip, port):
    s = socket.socket()
    s.bind((ip, 0))
    s.connect(("127.0.0.1", port))
    return s


def closed_within(s, secs):
    """Whether the peer closes `s` within `secs` (data before the close is
    read over)."""
    s.settimeout(0.2)
    until = time.time() + secs
    while time.time() < until:
        try:
            if s.recv(65536) == b"":
                return True
        except socket.timeout:
            continue
        except (ConnectionResetError, OSError):
            return True
    return False


def h2_idle(port):
    """An HTTP/2 client that opens a connection and then only answers: its
    preface and settings, acks to roostd's settings and pings."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + struct.pack(">I", 0)[1:] + b"\x04\x00\x00\x00\x00\x00")
    done = {"closed": None}
    start = time.time()

    def answer():
        buf = b""
        while True:
            try:
                chunk = s.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                done["closed"] = time.time() - start
                return
            buf += chunk
            while len(buf) >= 9:
                length = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + length:
                    break
                kind, flags, payload = buf[3], buf[4], buf[9:9 + length]
                buf = buf[9 + length:]
                try:
                    if kind == 4 and not flags & 1:  # SETTINGS: ack
                        s.sendall(b"\x00\x00\x00\x04\x01\x00\x00\x00\x00")
                    elif kind == 6 and not flags & 1:  # PING: ack
                        s.sendall(b"\x00\x00\x08\x06\x01\x00\x00\x00\x00" + payload)
                except OSError:
                    pass
    threading.Thread(target=answer, daemon=True).start()
    return s, done


def attacks(d, root, a2a, tokens, guests, driver, servers):
    """`tokens`: roostd's gateway token and billing's; `guests`: the test
    guests' dir; `driver`: the openai driver's component and manifest dir."""
    gl, billing = tokens
    linker, caller, relay = (os.path.join(guests, f"{n}.wasm") for n in ["linker", "caller", "relay"])
    state = os.path.realpath(d.state)

    # A link a guest plants in its grant, opened again at its next task.
    app = os.path.join(os.path.realpath(root), "srv", "app")
    os.makedirs(os.path.join(app, "inner"))
    with open(os.path.join(app, "inner", "f"), "w") as f:
        f.write("inner file")
    with open(os.path.join(app, "x"), "w") as f:
        f.write("plain")
    grants = f"capabilities: {{filesystem: {{read_write: [\"{app}\"], read_only: [\"{app}/x\"]}}}}\n"
    r = d.ctl("start", capsule(root, "linker", grants, wasm=linker), "--name", "linker")
    assert r.returncode == 0, r.stderr
    up = os.path.relpath(state, app)
    _, first = task_of(a2a, "linker", gl, "l1", f"link {app} {up} x\nlink {app} inner within\nread {app}/within/f")
    with open(os.path.join(app, "x", "roost.db"), "rb") as f:
        outside = f.read(15) == b"SQLite format 3"
    state2, second = task_of(a2a, "linker", gl, "l2", f"read {app}/x/roost.db")
    record("a link planted in a grant, opened at the next task",
           state2 == "TASK_STATE_FAILED" and "passes through a link" in second and "SQLite" not in second,
           second[:80], outside and json.loads(first or "[]")[2:] == ["inner file"],
           "the link read outside the jail; a link within the grant followed")

    # A guest making files without end.
    for name, limits in [("files-bounded", "capabilities: {limits: {files: 50}}\n"), ("files-free", "")]:
        r = d.ctl("start", capsule(root, name, limits, wasm=linker), "--name", name)
        assert r.returncode == 0, r.stderr
    _, bounded = task_of(a2a, "files-bounded", gl, "f1", "make . a 80")
    _, free = task_of(a2a, "files-free", gl, "f2", "make . a 80")
    record("a guest makes 80 files past a limit of 50", bounded == '["made 50 err:quota"]', bounded,
           free == '["made 80"]', f"the default limit: {free}")

    # A manifest naming another variable of roostd's environment as its key.
    registry = os.path.join(d.state, "registry")
    driver_wasm, driver_dir = driver
    pub_dir = os.path.join(root, "openai-driver")
    os.makedirs(pub_dir)
    shutil.copy(os.path.join(driver_dir, "murmur.yaml"), pub_dir)
    shutil.copy(driver_wasm, os.path.join(pub_dir, "component.wasm"))
    pub = d.ctl("publish", pub_dir, "--registry", registry)
    assert pub.returncode == 0, pub.stderr

    def agent(name, key):
        m = servers.model_port
        d_ = os.path.join(root, f"agent-{name}")
        os.makedirs(d_)
        with open(os.path.join(d_, "murmur.yaml"), "w") as f:
            f.write(f"name: {name}\nversion: 0.1.0\n"
                    "artifacts:\n  - {name: openai-driver, version: 0.1.0, runtime: driver}\n"
                    f"capabilities: {{network: {{allow: [\"http://127.0.0.1:{m}\"]}}}}\n"
                    f"inference: {{endpoint: \"http://127.0.0.1:{m}/v1\", model: m, api_key: {key}, "
                    "driver: {artifact: openai-driver}}\n")
        return d_
    stolen = d.ctl("start", agent("steal", "{env: RED_TEAM_CLOUD_SECRET}"), "--task", "hi", "--wait")
    heard = list(servers.model_auth)
    ok = d.ctl("start", agent("keyed", "{env: RED_TEAM_MODEL_KEY}"), "--task", "hi", "--wait")
    record("inference.api_key naming a variable key_env_allow does not list",
           stolen.returncode != 0 and "key_env_allow" in stolen.stderr and not heard
           and CLOUD_SECRET not in stolen.stderr,
           stolen.stderr.strip().splitlines()[-1][:80] if stolen.stderr.strip() else "started",
           ok.returncode == 0 and servers.model_auth == [f"Bearer {MODEL_KEY}"],
           "the listed key reached its endpoint")

    # A capsule sending in process to a route that takes its own token.
    net = f"capabilities: {{network: {{allow: [\"http://127.0.0.1:{a2a}\"]}}}}\n"
    r = d.ctl("start", capsule(root, "sender", net), "--name", "sender")
    assert r.returncode == 0, r.stderr
    state_s, said = task_of(a2a, "sender", gl, "s1", f"forward http://127.0.0.1:{a2a}/a2a/billing hi")
    record("an in-process send to a route with its own token, without it",
           state_s == "TASK_STATE_FAILED" and "401" in said, said[:80],
           accepted(a2a, "billing", billing, "s2"), "a client with billing's token is taken")

    # A peer that streams artifact after artifact of a MiB under new ids.
    allow = f"capabilities: {{network: {{allow: [\"http://127.0.0.1:{servers.peer_port}\", " \
            f"\"http://127.0.0.1:{servers.oauth_port}\"]}}}}\n"
    for name, wasm in [("caller", caller), ("relay", relay)]:
        r = d.ctl("start", capsule(root, name, allow, wasm=wasm), "--name", name)
        assert r.returncode == 0, r.stderr
    peer = f"http://127.0.0.1:{servers.peer_port}"
    pid = d.proc.pid
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    before = vm_hwm_kib(pid)
    flood = task_of(a2a, "caller", gl, "c1", f"call {peer}/big 60 go")
    grew = vm_hwm_kib(pid) - before
    few = task_of(a2a, "caller", gl, "c2", f"call {peer}/few 60 go")
    record("a peer streams 400 artifacts of 1 MiB under new ids",
           flood[0] == "TASK_STATE_FAILED" and "grew past 4 MiB" in flood[1] and grew < 64 << 10,
           f"{flood[1][:50]}; roostd's peak +{grew >> 10} MiB",
           few == ("TASK_STATE_COMPLETED", "completed: few0 few1 few2 "), few[1])
    longid = task_of(a2a, "caller", gl, "c3", f"call {peer}/longid 60 go")
    record("a peer names its task with a 1 KiB id", longid[0] == "TASK_STATE_FAILED" and "id over 256" in longid[1],
           longid[1][:70], few[0] == "TASK_STATE_COMPLETED", "an ordinary id is taken")

    # An OAuth 2 token URL that says `expires_in: 0`, and one that never answers.
    o = f"http://127.0.0.1:{servers.oauth_port}"
    said = [task_of(a2a, "relay", gl, f"o{i}", f"url={o}/ok/\nendpoint=true\nbinding=jsonrpc\nversion=1.0\ntext=hi")
            for i in range(3)]
    started = time.time()
    stalled = task_of(a2a, "relay", gl, "o9", f"url={o}/stalled/\nendpoint=true\nbinding=jsonrpc\nversion=1.0\ntext=hi")
    took = time.time() - started
    record("an OAuth 2 token URL that never answers", stalled[0] == "TASK_STATE_FAILED"
           and "did not answer within 10 s" in stalled[1] and took < 20, f"failed after {took:.1f} s",
           all(s == ("TASK_STATE_COMPLETED", "Bearer oauth-1") for s in said) and servers.token_fetches["token"] == 1,
           f"expires_in 0: 3 calls, {servers.token_fetches['token']} fetch"
           + ("" if all(s == ("TASK_STATE_COMPLETED", "Bearer oauth-1") for s in said) else f"; {said}"))

    # More schedules than the operator lets a capsule declare.
    def scheduled(name, n):
        lines = "".join(f"  - {{name: s{i}, text: hi, every: 1h}}\n" for i in range(n))
        return d.ctl("start", capsule(root, name, "schedules:\n" + lines), "--name", name)
    many, enough = scheduled("many", 65), scheduled("enough", 64)
    record("a manifest declaring 65 schedules", many.returncode != 0 and "schedules.max_per_capsule" in many.stderr,
           "refused" if many.returncode else "started", enough.returncode == 0, "64 start")
    d.ctl("stop", "enough")

    # The control socket's directory: a grant holding it, and a workdir beside it.
    run = os.path.dirname(d.socket)
    beside = os.path.join(run, "beside")
    os.makedirs(beside)
    held = d.ctl("start", capsule(root, "sockdir", f"capabilities: {{filesystem: {{read_write: [\"{run}\"]}}}}\n"))
    near = d.ctl("start", capsule(root, "beside"), "--workdir", beside, "--name", "beside")
    record("a writable grant holding the control socket's directory",
           held.returncode != 0 and "control socket" in held.stderr, "refused" if held.returncode else "started",
           near.returncode == 0, "a workdir beside the socket starts")

    # Idle HTTP/2 connections up to a client's share, a body that trickles,
    # one client address at its share.
    idle = [h2_idle(a2a) for _ in range(8)]
    time.sleep(0.3)
    ninth = connect_from("127.0.0.1", a2a)
    over_share = closed_within(ninth, 1)
    other = connect_from("127.0.0.2", a2a)
    other.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{a2a}\r\nConnection: close\r\n\r\n".encode())
    other.settimeout(5)
    served_other = other.recv(64).startswith(b"HTTP/1.1 200")
    other.close()
    until = time.time() + 10
    while time.time() < until and any(done["closed"] is None for _, done in idle):
        time.sleep(0.2)
    closed = [done["closed"] for _, done in idle]
    for s, _ in idle:
        s.close()
    ninth.close()
    status, _, _ = http(a2a, "GET", "/healthz")
    record("8 idle HTTP/2 connections (pings answered), then a client",
           all(c is not None and c < 8 for c in closed),
           f"closed after {max((c or 99) for c in closed):.1f} s", status == 200, f"a request afterwards: {status}")
    record("a 9th connection from an address at its share (8)", over_share, "closed at once",
           served_other, "another address is served")
    slow = socket.create_connection(("127.0.0.1", a2a))
    slow.sendall(f"POST /a2a/other HTTP/1.1\r\nHost: 127.0.0.1:{a2a}\r\nAuthorization: Bearer {gl}\r\n"
                 "A2A-Version: 1.0\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode())
    started = time.time()
    cut = closed_within(slow, 8)
    took = time.time() - started
    slow.close()
    record("a request body that never arrives whole", cut and took < 8, f"cut off after {took:.1f} s",
           accepted(a2a, "other", gl, "b1"), "the same request sent whole is taken")
