"""A Kubernetes API server on loopback that runs the jobs it is given through the launch rehearsal.

It stands in for the EKS API server (reached through the access host's SSM tunnel) in the README's
walkthroughs: `trn submit/status/logs/cancel --backend eks` and the `kubectl` stand-in talk to it with the
real Kubernetes client, over HTTPS, with the kubeconfig the walkthrough wrote. It serves discovery for the
kinds the project creates, create/get/list (label selectors)/delete, and pod logs. Every object created
is kept in :attr:`FakeCluster.created`, in order, for tests to assert in full.

A batch/v1 Job or a Volcano Job is not only stored: its pods appear (Pending, then Running) and the job's
pod template runs through the launch rehearsal (tests/support/rehearsal.py) on this machine, one process group
per pod; pods end Succeeded or Failed with the node's real exit code and output, which is what
`trn status --wait` and `trn logs` then print.
"""

from __future__ import annotations

import datetime
import itertools
import json
import ssl
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

VERSION = {"major": "1", "minor": "35", "gitVersion": "v1.35.0-fake", "platform": "linux/amd64"}
# (group, version) -> [(plural, kind, namespaced)]: the kinds the charts, trn and the README use.
KINDS: dict[tuple[str, str], list[tuple[str, str, bool]]] = {
    ("", "v1"): [
        ("namespaces", "Namespace", False), ("pods", "Pod", True), ("services", "Service", True),
        ("configmaps", "ConfigMap", True), ("serviceaccounts", "ServiceAccount", True), ("secrets", "Secret", True),
        ("persistentvolumeclaims", "PersistentVolumeClaim", True), ("persistentvolumes", "PersistentVolume", False),
        ("nodes", "Node", False),
    ],
    ("batch", "v1"): [("jobs", "Job", True)],
    ("batch.volcano.sh", "v1alpha1"): [("jobs", "Job", True)],
    ("scheduling.volcano.sh", "v1beta1"): [("queues", "Queue", False), ("podgroups", "PodGroup", True)],
    ("apps", "v1"): [("deployments", "Deployment", True), ("daemonsets", "DaemonSet", True)],
    ("rbac.authorization.k8s.io", "v1"): [
        ("roles", "Role", True), ("rolebindings", "RoleBinding", True),
        ("clusterroles", "ClusterRole", False), ("clusterrolebindings", "ClusterRoleBinding", False),
    ],
    ("storage.k8s.io", "v1"): [("storageclasses", "StorageClass", False)],
    ("networking.k8s.io", "v1"): [("networkpolicies", "NetworkPolicy", True)],
    ("policy", "v1"): [("poddisruptionbudgets", "PodDisruptionBudget", True)],
}
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
VOLCANO = ("batch.volcano.sh", "v1alpha1")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _selector(text: str) -> dict[str, str | None]:
    """A label selector's terms: ``key=value``, or ``key`` alone (the label exists: value None)."""
    terms = (part.partition("=") for part in text.split(",") if part) if text else ()
    return {key: value if eq else None for key, eq, value in terms}


@dataclass
class Run:
    """A job's execution: its pods (in node order) and what each printed."""

    pods: list[dict[str, Any]]
    done: threading.Event = field(default_factory=threading.Event)
    outputs: list[str] = field(default_factory=list)
    codes: list[int | None] = field(default_factory=list)


# A runner gets the job object and returns one (exit code, output) per pod, in pod order.
Runner = Callable[[dict[str, Any]], list[tuple[int, str]]]


class FakeCluster:
    """The API server's state and its HTTPS listener on 127.0.0.1."""

    def __init__(self, *, runner: Runner, host_names: tuple[str, ...] = ("localhost",)) -> None:
        self.runner = runner
        self.objects: dict[tuple[str, str, str, str, str], dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str, str]] = []
        self.runs: dict[tuple[str, str], Run] = {}
        self.tokens: list[str] = []  # the bearer tokens clients sent
        self.lock = threading.RLock()
        self._uid = itertools.count(1)
        self.tls_dir = Path(tempfile.mkdtemp(prefix="fake-kube-tls-"))
        self.ca_pem, cert, key = _certificates(host_names)
        (self.tls_dir / "cert.pem").write_bytes(cert)
        (self.tls_dir / "key.pem").write_bytes(key)
        self.server: ThreadingHTTPServer | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, port: int = 0) -> int:
        cluster = self

        class Handler(_Handler):
            state = cluster

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.tls_dir / "cert.pem", self.tls_dir / "key.pem")
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self.server.server_address[1]

    def write_kubeconfig(self, path: Path, port: int) -> Path:
        """A kubeconfig whose context `eks` reaches this listener on ``port`` (namespace training), as a user's."""
        import base64

        import yaml

        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "eks",
            "clusters": [{"name": "eks", "cluster": {"server": f"https://localhost:{port}",
                                                      "certificate-authority-data": base64.b64encode(self.ca_pem).decode()}}],
            "users": [{"name": "me", "user": {"token": "test-token-0123456789abcdef"}}],
            "contexts": [{"name": "eks", "context": {"cluster": "eks", "user": "me", "namespace": "training"}}],
        }))
        return path

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        for run in self.runs.values():
            run.done.wait(timeout=0)

    def wait_for_jobs(self, timeout: float = 600) -> None:
        for run in list(self.runs.values()):
            run.done.wait(timeout)

    # -- objects -----------------------------------------------------------------------------------

    def list(self, group: str, version: str, plural: str, namespace: str, labels: dict[str, str | None]) -> list[dict]:
        def matches(obj: dict[str, Any]) -> bool:
            have = obj["metadata"].get("labels") or {}
            return all(k in have if val is None else have.get(k) == val for k, val in labels.items())

        with self.lock:
            return [
                o for (g, v, p, ns, _), o in self.objects.items()
                if (g, v, p) == (group, version, plural) and (not namespace or ns == namespace) and matches(o)
            ]

    def create(self, group: str, version: str, plural: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        meta = dict(body.get("metadata") or {})
        key = (group, version, plural, namespace, meta.get("name", ""))
        with self.lock:
            if key in self.objects:
                raise _Conflict(f'{plural} "{meta.get("name")}" already exists')
            meta.update(uid=f"uid-{next(self._uid)}", creationTimestamp=_now(), resourceVersion="1")
            if namespace:
                meta["namespace"] = namespace
            obj = {**body, "metadata": meta}
            self.objects[key] = obj
            self.created.append(obj)
        if (group, version, plural) in (("batch", "v1", "jobs"), (*VOLCANO, "jobs")):
            self._start(group, namespace, obj)
        return obj

    def delete(self, group: str, version: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.pop((group, version, plural, namespace, name), None)
            if obj is not None:
                self.deleted.append((plural, namespace, name))
                run = self.runs.get((namespace, name))
                for pod in run.pods if run else []:
                    self.objects.pop(("", "v1", "pods", namespace, pod["metadata"]["name"]), None)
        return obj

    # -- jobs --------------------------------------------------------------------------------------

    def _pod(self, namespace: str, name: str, template: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
        meta = template.get("metadata") or {}
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": namespace, "uid": f"uid-{next(self._uid)}", "creationTimestamp": _now(),
                "labels": {**(meta.get("labels") or {}), **labels}, "annotations": dict(meta.get("annotations") or {}),
            },
            "spec": {**template["spec"], "nodeName": "ip-10-0-64-10.us-west-2.compute.internal"},
            "status": {"phase": "Pending"},
        }

    def _start(self, group: str, namespace: str, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        if group == "batch":
            pods = [self._pod(namespace, f"{name}-{uuid.uuid4().hex[:5]}", job["spec"]["template"],
                              {"job-name": name, "batch.kubernetes.io/job-name": name})]
        else:
            pods = [
                self._pod(namespace, f"{name}-{task['name']}-{i}", task["template"],
                          {"volcano.sh/job-name": name, "volcano.sh/task-spec": task["name"]})
                for task in job["spec"]["tasks"] for i in range(task["replicas"])
            ]
        run = Run(pods=pods)
        with self.lock:
            self.runs[(namespace, name)] = run
            for pod in pods:
                self.objects[("", "v1", "pods", namespace, pod["metadata"]["name"])] = pod
        threading.Thread(target=self._execute, args=(group, job, run), daemon=True).start()

    def _execute(self, group: str, job: dict[str, Any], run: Run) -> None:
        with self.lock:
            for pod in run.pods:
                pod["status"] = {"phase": "Running", "startTime": _now()}
        try:
            results = self.runner(job)
        except Exception as error:  # noqa: BLE001 - a rehearsal that cannot start fails the job, visibly
            results = [(127, f"rehearsal could not run the pod: {error!r}\n") for _ in run.pods]
        with self.lock:
            run.codes = [code for code, _ in results]
            run.outputs = [out for _, out in results]
            for pod, (code, _) in zip(run.pods, results, strict=True):
                phase = "Succeeded" if code == 0 else "Failed"
                pod["status"] = {
                    "phase": phase,
                    "containerStatuses": [{
                        "name": pod["spec"]["containers"][0]["name"], "ready": False, "restartCount": 0,
                        "image": pod["spec"]["containers"][0].get("image", ""), "imageID": "",
                        "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}},
                    }],
                }
            ok = all(code == 0 for code, _ in results)
            status = job.setdefault("status", {})
            if group == "batch":
                status["conditions"] = [{"type": "Complete" if ok else "Failed", "status": "True",
                                         "reason": None if ok else "BackoffLimitExceeded"}]
                status["succeeded" if ok else "failed"] = 1
            else:
                status["state"] = {"phase": "Completed" if ok else "Failed"}
        run.done.set()

    def log(self, namespace: str, pod_name: str) -> tuple[Run | None, int]:
        with self.lock:
            for (ns, _), run in self.runs.items():
                for index, pod in enumerate(run.pods):
                    if ns == namespace and pod["metadata"]["name"] == pod_name:
                        return run, index
        return None, -1


class _Conflict(Exception):
    pass


def _certificates(host_names: tuple[str, ...]) -> tuple[bytes, bytes, bytes]:
    """A CA and a server certificate for ``host_names`` and 127.0.0.1 (PEM: CA cert, cert, key)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-kube-ca")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName(h) for h in host_names] + [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host_names[0])]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return (
        ca.public_bytes(pem),
        cert.public_bytes(pem),
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def _resource_list(group: str, version: str) -> dict[str, Any]:
    resources = []
    for plural, kind, namespaced in KINDS[(group, version)]:
        resources.append({"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind, "verbs": VERBS})
        if plural == "pods":
            resources.append({"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]})
        if plural == "jobs":
            resources.append({"name": "jobs/status", "singularName": "", "namespaced": True, "kind": "Job", "verbs": ["get", "patch", "update"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}" if group else version, "resources": resources}


class _Handler(BaseHTTPRequestHandler):
    state: FakeCluster
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    # -- plumbing ----------------------------------------------------------------------------------

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                          "message": message, "code": code})

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}") if length else {}

    def _route(self) -> tuple[str, str, str, str, str, str, dict[str, list[str]]] | None:
        """(group, version, plural, namespace, name, subresource, query) of a resource path."""
        url = urlparse(self.path)
        parts = [p for p in url.path.split("/") if p]
        query = parse_qs(url.query)
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = ""
        if len(rest) >= 2 and rest[0] == "namespaces" and (len(rest) > 2):
            namespace, rest = rest[1], rest[2:]
        if not rest:
            return None
        plural, name, sub = rest[0], rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else ""
        if (group, version) not in KINDS or plural not in {k[0] for k in KINDS[(group, version)]}:
            return None
        return group, version, plural, namespace, name, sub, query

    def _auth(self) -> bool:
        header = self.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or len(header) < 20:
            self._status(401, "Unauthorized", "Unauthorized")
            return False
        self.state.tokens.append(header.removeprefix("Bearer "))
        return True

    # -- verbs -------------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802
        path = urlparse(self.path).path.rstrip("/")
        if not self._auth():
            return
        if path == "/version":
            return self._send(200, VERSION)
        if path == "/api":
            return self._send(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        if path == "/apis":
            groups = [
                {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                 "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}}
                for g, v in KINDS if g
            ]
            return self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        if path == "/api/v1":
            return self._send(200, _resource_list("", "v1"))
        parts = path.split("/")
        if len(parts) == 4 and parts[1] == "apis" and (parts[2], parts[3]) in KINDS:
            return self._send(200, _resource_list(parts[2], parts[3]))
        route = self._route()
        if route is None:
            return self._status(404, "NotFound", f"the server could not find the requested resource ({path})")
        group, version, plural, namespace, name, sub, query = route
        if not name:
            items = self.state.list(group, version, plural, namespace, _selector(query.get("labelSelector", [""])[0]))
            kind = next(k for p, k, _ in KINDS[(group, version)] if p == plural)
            return self._send(200, {"kind": f"{kind}List", "apiVersion": f"{group}/{version}".lstrip("/"),
                                    "metadata": {"resourceVersion": "1"}, "items": items})
        if plural == "pods" and sub == "log":
            return self._log(namespace, name, follow=query.get("follow", ["false"])[0] == "true")
        with self.state.lock:
            obj = self.state.objects.get((group, version, plural, namespace, name))
            body = json.loads(json.dumps(obj)) if obj else None
        if body is None:
            return self._status(404, "NotFound", f'{plural} "{name}" not found')
        return self._send(200, body)

    def do_POST(self) -> None:  # noqa: N802
        if not self._auth():
            return
        route = self._route()
        if route is None:
            return self._status(404, "NotFound", f"no such resource ({self.path})")
        group, version, plural, namespace, _, _, _ = route
        try:
            created = self.state.create(group, version, plural, namespace, self._body())
        except _Conflict as error:
            return self._status(409, "AlreadyExists", str(error))
        return self._send(201, created)

    def do_DELETE(self) -> None:  # noqa: N802
        if not self._auth():
            return
        route = self._route()
        if route is None:
            return self._status(404, "NotFound", f"no such resource ({self.path})")
        group, version, plural, namespace, name, _, _ = route
        self._body()
        obj = self.state.delete(group, version, plural, namespace, name)
        if obj is None:
            return self._status(404, "NotFound", f'{plural} "{name}" not found')
        return self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name}})

    def _log(self, namespace: str, pod_name: str, *, follow: bool) -> None:
        run, index = self.state.log(namespace, pod_name)
        if run is None:
            return self._status(404, "NotFound", f'pods "{pod_name}" not found')
        if follow:
            run.done.wait(timeout=900)
        elif not run.done.is_set():
            return self._status(400, "BadRequest", f'container in pod "{pod_name}" is waiting to start')
        data = (run.outputs[index] if index < len(run.outputs) else "").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

