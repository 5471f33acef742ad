"""A hostile tool: tries each attack named in attack.json and prints one JSON
line per attack, {"attack", "ok", "detail"}, where ok means the attack
worked. Run by the red-team tests inside roostd's jail, in an unjailed
roostd, and directly by the test process (the controls)."""

import ctypes
import json
import os
import socket
import subprocess
import sys

params = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "attack.json"))
libc = ctypes.CDLL(None, use_errno=True)


def report(name, fn):
    try:
        ok, detail = fn()
    except OSError as e:
        ok, detail = False, f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - any failure is the attack failing
        ok, detail = False, f"{type(e).__name__}: {e}"
    print(json.dumps({"attack": name, "ok": ok, "detail": str(detail)[:200]}), flush=True)


def control_socket():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(params["socket"])
    s.sendall(b"GET /v1/sessions HTTP/1.0\r\nHost: roostd\r\n\r\n")
    head = s.recv(200).decode("latin-1")
    status = head.split("\r\n")[0]
    return " 200 " in status + " ", status


def abstract_socket():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect("\0" + params["abstract"])
    return True, "connected"


def read(path):
    def attack():
        with open(path, "rb") as f:
            return True, f"read {len(f.read())} bytes"

    return attack


def write_bookkeeping():
    # roostd's logs for this session, in the workdir the tool may write.
    path = os.path.join(".murmur", os.environ["MURMUR_SESSION_ID"], "logs", "planted.txt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("planted\n")
    return True, path


def write_outside():
    path = os.path.join(params["outside"], f"escaped-{os.getpid()}")
    with open(path, "w") as f:
        f.write("escaped\n")
    return True, path


def ptrace():
    # Its own child (which Yama's default scope allows), holding none of the
    # tool's pipes.
    child = subprocess.Popen(
        ["sleep", "5"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        rc = libc.ptrace(16, child.pid, None, None)  # PTRACE_ATTACH
        err = ctypes.get_errno()
        if rc == 0:
            os.waitpid(child.pid, 0)  # the attach stop
            libc.ptrace(17, child.pid, None, None)  # PTRACE_DETACH
        return rc == 0, f"rc={rc} errno={os.strerror(err) if err else 0}"
    finally:
        child.kill()
        child.wait()


def sock(family, kind, proto=0):
    def attack():
        s = socket.socket(family, kind, proto)
        s.close()
        return True, "created"

    return attack


def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"udp\n", ("127.0.0.1", params["udp_port"]))
    return True, "sent"


def tcp(key):
    def attack():
        port = params[key]
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.close()
        return True, f"connected to {port}"

    return attack


def fd_exhaustion():
    fds = []
    try:
        for _ in range(4096):
            fds.append(os.open("/dev/null", os.O_RDONLY))
        return True, f"{len(fds)} descriptors"
    finally:
        for fd in fds:
            os.close(fd)


def leftover_child():
    child = subprocess.Popen(
        ["sleep", "60"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return True, str(child.pid)


attacks = {
    "control_socket": control_socket,
    "abstract_socket": abstract_socket,
    "proc_environ": read(f"/proc/{params['roostd_pid']}/environ"),
    "roostd_files": read(params["roostd_file"]),
    "etc_shadow": read("/etc/shadow"),
    "write_outside": write_outside,
    "write_bookkeeping": write_bookkeeping,
    "ptrace": ptrace,
    "udp": udp,
    "raw_socket": sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
    "netlink_socket": sock(socket.AF_NETLINK, socket.SOCK_RAW, 0),
    "packet_socket": sock(socket.AF_PACKET, socket.SOCK_RAW, 0),
    "tcp_unlisted_port": tcp("unlisted_port"),
    "tcp_a2a_gateway": tcp("a2a_port"),
    "fd_exhaustion": fd_exhaustion,
    "leftover_child": leftover_child,
}

for name in params["attacks"]:
    report(name, attacks[name])
