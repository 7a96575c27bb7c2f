"""moto's server on loopback, as the README walkthroughs' AWS (``python -m tests.moto_server PORT CA_FILE ENDPOINT``).

One change to moto, the only one: an EKS cluster's endpoint and certificate authority are the address
(ENDPOINT) and CA (read from CA_FILE) of the walkthrough's Kubernetes API stand-in (tests/fake_kube.py),
instead of moto's random strings, so that the kubeconfig `aws eks update-kubeconfig` and `trn connect` write trusts that server. Batch jobs do not
run in Docker (there is none here): the harness runs each submitted job through the launch rehearsal.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path


def main(port: int, ca_file: Path, endpoint: str) -> None:
    from moto.core.models import default_user_config
    from moto.eks import models
    from moto.server import ThreadedMotoServer

    default_user_config["batch"] = {"use_docker": False}

    ca = base64.b64encode(ca_file.read_bytes()).decode()
    original = models.Cluster.__init__

    def cluster_init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        self.certificate_authority = {"data": ca}
        self.endpoint = endpoint

    models.Cluster.__init__ = cluster_init  # type: ignore[method-assign]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    print(f"moto listening on {port}", flush=True)
    try:
        sys.stdin.read()  # until the harness closes our stdin
    finally:
        server.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
