"""What every red-team attack uses: free ports, secret files, one HTTP/1.1
request at a time, a roostd started from a config, capsule directories,
and the record of each attack and its control. Standard library only."""

import json
import os
import shutil
import signal
import socket
import subprocess
import time

BIN = CONFORMANCE = None
results = []


def setup(bin_dir, conformance):
    """Where roostd and roostctl are, and the conformance capsule."""
    global BIN, CONFORMANCE
    BIN, CONFORMANCE = bin_dir, conformance


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def secret_file(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return path


def http(port, method, path, headers=None, body=b"", host=None):
    """One HTTP/1.1 request over a fresh connection: (status, head, body)."""
    headers = dict(headers or {})
    head = f"{method} {path} HTTP/1.1\r\nHost: {host or f'127.0.0.1:{port}'}\r\nConnection: close\r\n"
    for k, v in headers.items():
        head += f"{k}: {v}\r\n"
    head += f"Content-Length: {len(body)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head.encode() + body)
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    top, _, rest = raw.partition(b"\r\n\r\n")
    lines = top.decode(errors="replace").split("\r\n")
    status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else 0
    return status, "\n".join(lines).lower(), rest.decode(errors="replace")


def send(port, route, message_id, headers=None, host=None):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "hello"}]}}})
    h = {"A2A-Version": "1.0", "Content-Type": "application/json"}
    h.update(headers or {})
    return http(port, "POST", f"/a2a/{route}", h, body.encode(), host)


def record(name, attack_ok, attack_said, control_ok, control_said):
    """attack_ok: the attack failed closed; control_ok: the control worked."""
    results.append((attack_ok, control_ok))
    print(f"{'PASS' if attack_ok and control_ok else 'FAIL'} {name}: attack "
          f"{'refused' if attack_ok else 'SUCCEEDED'} ({attack_said}); control "
          f"{'ok' if control_ok else 'FAILED'} ({control_said})", flush=True)


class Roostd:
    def __init__(self, root, config, env=None):
        self.root = root
        self.socket = os.path.join(root, "run", "roostd.sock")
        self.state = os.path.join(root, "state")
        self.config = os.path.join(root, "roost.yaml")
        with open(self.config, "w") as f:
            f.write(config)
        self.log = open(os.path.join(root, "roostd.log"), "w")
        env = {**{k: v for k, v in os.environ.items() if k != "RUST_LOG"}, **(env or {})}
        self.proc = subprocess.Popen(
            [f"{BIN}/roostd", "--config", self.config, "--state-dir", self.state,
             "--socket", self.socket], stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        deadline = time.time() + 60
        while self.ctl("status").returncode != 0:
            if self.proc.poll() is not None or time.time() > deadline:
                raise SystemExit(f"roostd did not come up:\n{self.read_log()}")
            time.sleep(0.1)

    def ctl(self, *args):
        return subprocess.run([f"{BIN}/roostctl", "--socket", self.socket, *args],
                              capture_output=True, text=True)

    def read_log(self):
        with open(os.path.join(self.root, "roostd.log")) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def capsule(root, name, extra="", wasm=None, lifecycle=True):
    wasm = wasm or CONFORMANCE
    d = os.path.join(root, f"capsule-{name}")
    os.makedirs(d, exist_ok=True)
    shutil.copy(wasm, os.path.join(d, "component.wasm"))
    life = "lifecycle: {task_acceptance: queue, after_task: sleep}\n" if lifecycle else ""
    with open(os.path.join(d, "murmur.yaml"), "w") as f:
        f.write(f"name: {name}\nversion: 0.1.0\ncomponent: component.wasm\n{life}{extra}")
    return d
