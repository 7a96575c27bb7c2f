"""session-manager-plugin, as the README walkthroughs' workstation has it (tests/support/readme_exemptions.py).

The AWS CLI's `aws ssm start-session` calls StartSession (moto, tests/support/moto_server.py) and then runs
``session-manager-plugin RESPONSE REGION StartSession PROFILE PARAMETERS ENDPOINT``, as the real plugin is
run. This stand-in serves the one document the project uses, ``AWS-StartPortForwardingSessionToRemoteHost``:
it checks that the remote host is the EKS endpoint's name the harness gave the cluster (HARNESS_API_HOST)
and the port 443, then listens on localhost:localPortNumber and forwards each connection to where that
host's API server really is here (HARNESS_API_ADDRESS, host:port), which is what the access host in the
VPC does. Anything else exits 1 naming it. It prints what the real plugin prints, and runs until killed.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading

VERSION = "1.2.707.0"
DOCUMENT = "AWS-StartPortForwardingSessionToRemoteHost"


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main(argv: list[str]) -> int:
    if argv[:1] == ["--version"]:
        print(VERSION)
        return 0
    response, _region, operation, _profile, parameters = argv[:5]
    session = json.loads(os.environ[response] if response in os.environ else response)
    request = json.loads(parameters)
    params = request.get("Parameters", {})
    expected = os.environ["HARNESS_API_HOST"]
    problems = [
        f"{key} is {value!r}, expected {want!r}"
        for key, value, want in (
            ("operation", operation, "StartSession"),
            ("DocumentName", request.get("DocumentName"), DOCUMENT),
            ("host", params.get("host"), [expected]),
            ("portNumber", params.get("portNumber"), ["443"]),
        )
        if value != want
    ]
    if problems:
        print(f"session-manager-plugin stand-in: {'; '.join(problems)}", file=sys.stderr)
        return 1
    (local,) = params["localPortNumber"]
    target_host, target_port = os.environ["HARNESS_API_ADDRESS"].rsplit(":", 1)
    server = socket.create_server(("127.0.0.1", int(local)))
    print(f"\nStarting session with SessionId: {session['SessionId']}", flush=True)
    print(f"Port {local} opened for sessionId {session['SessionId']}.\nWaiting for connections...\n", flush=True)
    while True:
        client, _ = server.accept()
        upstream = socket.create_connection((target_host, int(target_port)))
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
