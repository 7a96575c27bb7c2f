"""`trn connect`: reach the EKS API server from a workstation, private endpoint included.

With the default private endpoint, the API server answers only inside the VPC. The EKS stack runs a
small access host (constructs/api_access.py, output ``AccessHostId``); this command starts Session
Manager's port forwarding through it to the endpoint (``aws ssm start-session`` with the document
``AWS-StartPortForwardingSessionToRemoteHost``, in the background, its output in a log file), waits for
the local port, and writes a kubeconfig context for ``https://localhost:PORT`` that still checks the
endpoint's certificate under its own name (``tls-server-name``) and authenticates as the AWS CLI's
identity (``aws eks get-token``), like `aws eks update-kubeconfig`. A public endpoint gets the same
context with the endpoint itself as the server, and no forwarding.

``trn connect --stop`` ends the forwarding. Needs the AWS CLI and the Session Manager plugin on PATH.
``--stack NAME`` reaches the cluster of a stack of your own CDK app instead (its outputs ``ClusterName``
and, with a private endpoint, ``AccessHostId``): no config is read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlparse

from trainium_cdk.cli._common import CliError, client, parse_overrides, read_config, session, stack_outputs
from trainium_cdk.facts.names import (
    OUTPUT_ACCESS_HOST_ID,
    OUTPUT_CLUSTER_NAME,
    PORT_FORWARD_DOCUMENT,
    TRAINING_NAMESPACE,
)

DEFAULT_PORT = 8443
# How long the forwarding may take to listen: Session Manager opens the channel in a few seconds.
LISTEN_TIMEOUT_S = 60.0
PLUGIN_URL = "https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-install-plugin.html"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "connect", help="reach the EKS API server (private endpoint: SSM port forwarding); write the kubeconfig",
        description="Forward the EKS cluster's private API endpoint to localhost through the stack's access host "
        "(Session Manager, in the background), and write a kubeconfig context for it, current, with namespace "
        f"{TRAINING_NAMESPACE}. With a public endpoint, only the kubeconfig. --stop ends the forwarding.",
    )
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"local port (default {DEFAULT_PORT})")
    p.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig to write (default: $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--stop", action="store_true", help="end the port forwarding this command started")
    p.add_argument("--config", metavar="PATH", help="config YAML (default: config/default.yaml)")
    p.add_argument("-c", dest="overrides", action="append", metavar="KEY=VALUE", default=[],
                   help="override like `cdk synth -c` (region, backends, ...); repeatable")
    p.add_argument("--stack", metavar="NAME", help=f"a stack of your own CDK app with the outputs {OUTPUT_CLUSTER_NAME} "
                   f"and, for a private endpoint, {OUTPUT_ACCESS_HOST_ID} (TrainiumCluster, ApiAccessHost); no config")
    p.add_argument("--region", metavar="REGION", help="with --stack: the stack's region (default: the AWS CLI's)")
    p.set_defaults(func=run)


def _target(args: argparse.Namespace) -> tuple[str, str]:
    """(the stack with the cluster's outputs, its region): the config's EKS stack, or --stack."""
    if args.stack is None:
        if args.region is not None:
            raise CliError("--region goes with --stack; the config names the region of its stacks (-c region=R)")
        config = read_config(args.config, parse_overrides(args.overrides))
        if "eks" not in config.backends:
            raise CliError(
                f"the config deploys no EKS backend (backends: {', '.join(config.backends)}): nothing to connect to"
            )
        return config.stack_name("eks"), config.region
    if args.config or args.overrides:
        raise CliError("--stack reads no config: leave out --config and -c")
    region = args.region or session(None).region_name
    if not region:
        raise CliError(f"no region for stack {args.stack}: pass --region (or set AWS_REGION)")
    return args.stack, region


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    stack, region = _target(args)
    state = _state_dir() / f"connect-{stack}.json"
    if args.stop:
        stopped = _stop(state)
        out.write(f"stopped the port forwarding (pid {stopped})\n" if stopped else "no port forwarding was running\n")
        return 0
    if not 1024 <= args.port <= 65535:
        raise CliError(f"--port {args.port}: a port between 1024 and 65535")

    sess = session(region)
    outputs = stack_outputs(client(sess, "cloudformation"), stack, region, backend="eks", own=args.stack is not None)
    if args.stack is not None and OUTPUT_CLUSTER_NAME not in outputs:
        raise CliError(f"stack {stack} has no output {OUTPUT_CLUSTER_NAME}: add `cdk.CfnOutput(stack, "
                       f"\"{OUTPUT_CLUSTER_NAME}\", value=cluster.cluster_name)` to your app and deploy it")
    name = outputs.get(OUTPUT_CLUSTER_NAME) or stack
    cluster = client(sess, "eks").describe_cluster(name=name)["cluster"]
    endpoint = urlparse(cluster["endpoint"]).netloc.rsplit(":", 1)[0]  # as EKS spells it (upper case)
    host = outputs.get(OUTPUT_ACCESS_HOST_ID)
    if host:
        _forward(region, state, host=host, endpoint=endpoint, port=args.port, out=out)
        server = f"https://localhost:{args.port}"
    else:
        server = cluster["endpoint"]
    path = Path(args.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or Path.home() / ".kube" / "config")
    context = write_kubeconfig(path, cluster=cluster, server=server, tls_server_name=endpoint if host else None,
                               region=region)
    out.write(f"kubeconfig {path}: context {context} (current, namespace {TRAINING_NAMESPACE}) -> {server}\n")
    for line in _access_warnings(sess, cluster, own=args.stack is not None):
        err.write(f"warning: {line}\n")
    if host:
        out.write("the forwarding runs in the background until `trn connect --stop` (or the session's idle timeout; "
                  "run trn connect again)\n")
    return 0


def _state_dir() -> Path:
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    path = base / "trainium-cdk"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _forward(region: str, state: Path, *, host: str, endpoint: str, port: int, out: TextIO) -> None:
    """Start `aws ssm start-session` port forwarding in the background (or keep the one running)."""
    if state.exists():
        previous = json.loads(state.read_text())
        if _alive(previous["pid"]) and previous["port"] == port and previous["host"] == host and _listening(port):
            out.write(f"port forwarding already running (pid {previous['pid']}): localhost:{port} -> {endpoint}:443\n")
            return
        _stop(state)
    if _listening(port):
        raise CliError(f"localhost:{port} is in use by another program: pass --port with a free port")
    for tool, fix in (("aws", "install the AWS CLI"), ("session-manager-plugin", f"install it: {PLUGIN_URL}")):
        if shutil.which(tool) is None:
            raise CliError(f"`{tool}` is not on PATH, and port forwarding through Session Manager needs it: {fix}")
    command = [
        "aws", "ssm", "start-session", "--region", region, "--target", host,
        "--document-name", PORT_FORWARD_DOCUMENT,
        "--parameters", json.dumps({"host": [endpoint], "portNumber": ["443"], "localPortNumber": [str(port)]}),
    ]
    log = state.with_suffix(".log")
    with log.open("wb") as sink:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
    state.write_text(json.dumps({"pid": proc.pid, "port": port, "host": host, "endpoint": endpoint}))
    deadline = time.monotonic() + LISTEN_TIMEOUT_S
    while not _listening(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(state)
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
            raise CliError(
                f"port forwarding to {endpoint} through {host} did not start ({tail or 'no output'}): check that the "
                f"access host is online (`aws ssm describe-instance-information`) and that your identity may "
                f"ssm:StartSession on it with {PORT_FORWARD_DOCUMENT}"
            )
        time.sleep(0.5)
    out.write(f"port forwarding through {host} (pid {proc.pid}, log {log}): localhost:{port} -> {endpoint}:443\n")


def _stop(state: Path) -> int | None:
    if not state.exists():
        return None
    pid = json.loads(state.read_text())["pid"]
    state.unlink()
    if not _alive(pid):
        return None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    return pid


def write_kubeconfig(
    path: Path, *, cluster: dict[str, Any], server: str, tls_server_name: str | None, region: str
) -> str:
    """Add (or replace) the cluster, user and context named by the cluster's ARN, as `aws eks update-kubeconfig`
    names them, make the context current with the training namespace, keep every other entry. Returns the
    context's name."""
    import yaml

    arn = cluster["arn"]
    doc: dict[str, Any] = {}
    if path.exists():
        doc = yaml.safe_load(path.read_text()) or {}
    doc.setdefault("apiVersion", "v1")
    doc.setdefault("kind", "Config")
    entry: dict[str, Any] = {"server": server, "certificate-authority-data": cluster["certificateAuthority"]["data"]}
    if tls_server_name:
        entry["tls-server-name"] = tls_server_name
    user = {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
        "args": ["--region", region, "eks", "get-token", "--cluster-name", cluster["name"], "--output", "json"],
        "interactiveMode": "Never",
    }}
    for key, item in (("clusters", {"name": arn, "cluster": entry}), ("users", {"name": arn, "user": user}),
                      ("contexts", {"name": arn, "context": {"cluster": arn, "user": arn, "namespace": TRAINING_NAMESPACE}})):
        doc[key] = [e for e in doc.get(key) or [] if e.get("name") != arn] + [item]
    doc["current-context"] = arn
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
    return arn


def role_arn_of(caller: str) -> str | None:
    """The IAM role behind an assumed-role session ARN (`sts get-caller-identity`), else None."""
    parts = caller.split(":", 5)
    if len(parts) == 6 and parts[2] == "sts" and parts[5].startswith("assumed-role/"):
        role = parts[5].split("/")[1]
        return f"arn:{parts[1]}:iam::{parts[4]}:role/{role}"
    return None


def caller_role_among(caller: str, role_arns: Iterable[str]) -> tuple[str, str, bool]:
    """(the caller's principal ARN, its role name, whether ``role_arns`` lists that role). Role ARNs keep their
    path (SSO roles have one), an assumed-role session's ARN does not: roles are compared by name."""
    principal = role_arn_of(caller) or caller
    name = principal.rsplit("/", 1)[-1]
    return principal, name, any(arn.rsplit("/", 1)[-1] == name for arn in role_arns)


def _access_warnings(sess: Any, cluster: dict[str, Any], *, own: bool = False) -> list[str]:
    """A line when the caller has no access entry on the cluster (kubectl would get 401)."""
    from botocore.exceptions import ClientError

    caller = client(sess, "sts").get_caller_identity()["Arn"]
    try:
        entries = client(sess, "eks").list_access_entries(clusterName=cluster["name"]).get("accessEntries", [])
    except ClientError as error:
        return [f"could not list the cluster's access entries ({error}): kubectl may be refused"]
    principal, name, listed = caller_role_among(caller, entries)
    if listed:
        return []
    where = ("admin_role_arns of your app's TrainiumCluster, then deploy it" if own else
             "eks.admin_role_arns in the config, then `make synth` and `make deploy`")
    return [
        f"{principal} has no access entry on {cluster['name']}, so the API server will refuse it: add the role's ARN "
        f"(`aws iam get-role --role-name {name} --query Role.Arn`) to {where}"
    ]
