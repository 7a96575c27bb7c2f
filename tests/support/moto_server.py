"""moto's server on loopback, as the README walkthroughs' AWS (``python -m tests.support.moto_server PORT CA_FILE ENDPOINT
SESSIONS HOSTS SUBMITS``).

The changes to moto, the only ones:

- an EKS cluster's endpoint and certificate authority are ENDPOINT (a private endpoint's name, which
  resolves nowhere here) and the CA (read from CA_FILE) of the walkthrough's Kubernetes API stand-in
  (tests/support/fake_kube.py), whose certificate carries that name, instead of moto's random strings;
- Session Manager's StartSession and TerminateSession, which moto does not serve: a session to an instance
  moto runs is granted, and each request is appended, as the API received it, to SESSIONS (JSON lines),
  for the test to assert in full. What a session carries is the session-manager-plugin stand-in's
  (tests/support/ssm_plugin_standin.py);
- Run Command's SendCommand to an instance HOSTS (a JSON file: instance id -> host) names runs the command on
  that host stand-in (tests/support/ssm_host.py, in a process of its own) before it answers; GetCommandInvocation
  returns what it printed. Other instances get moto's own answers;
- every SubmitJob request is appended, as the API received it, to SUBMITS (JSON lines): moto keeps a job's
  numNodes but not its node property overrides, which the harness runs;
- DescribeJobDefinitions of a multi-node job definition includes its nodeProperties, as Batch's does (moto
  5.2.5 leaves them out; `trn submit --image` copies them into the revision it registers);
- DescribeJobs of a multi-node job's node (``<job id>#<index>``), which moto does not model, answers as Batch
  does: the job's description with that node's details and its own log stream
  (:func:`node_stream`, where the harness puts that node's output).

Batch jobs do not run in Docker (there is none here): the harness runs each submitted job through the
launch rehearsal.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path


def node_stream(definition_arn: str, job_id: str, index: int) -> str:
    """The log stream of node ``index`` of a multi-node job: the awslogs driver's form, <definition>/default/<task>
    (the task named after the job and the node here)."""
    definition = definition_arn.rsplit("/", 1)[-1].rsplit(":", 1)[0]
    return f"{definition}/default/{job_id}-node{index}"


def main(port: int, ca_file: Path, endpoint: str, sessions: Path, hosts: Path, submits: Path) -> None:
    import subprocess
    import uuid

    from moto.batch.responses import BatchResponse
    from moto.core.models import default_user_config
    from moto.core.responses import ActionResult
    from moto.ec2.models import ec2_backends
    from moto.eks import models
    from moto.server import ThreadedMotoServer
    from moto.ssm.responses import SimpleSystemManagerResponse

    default_user_config["batch"] = {"use_docker": False}

    ca = base64.b64encode(ca_file.read_bytes()).decode()
    original = models.Cluster.__init__

    def cluster_init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        self.certificate_authority = {"data": ca}
        self.endpoint = endpoint

    models.Cluster.__init__ = cluster_init  # type: ignore[method-assign]

    def start_session(self):  # type: ignore[no-untyped-def]
        request = json.loads(self.body)
        with sessions.open("a") as log:
            log.write(json.dumps({"action": "StartSession", "region": self.region, **request}) + "\n")
        ec2_backends[self.current_account][self.region].get_instance(request["Target"])  # unknown: an error
        session_id = f"user-{len(sessions.read_text().splitlines()):017x}"
        return ActionResult({"SessionId": session_id, "TokenValue": "harness-token",
                             "StreamUrl": f"wss://ssmmessages.{self.region}.amazonaws.com/v1/data-channel/{session_id}"})

    def terminate_session(self):  # type: ignore[no-untyped-def]
        with sessions.open("a") as log:
            log.write(json.dumps({"action": "TerminateSession", **json.loads(self.body)}) + "\n")
        return ActionResult({"SessionId": json.loads(self.body)["SessionId"]})

    SimpleSystemManagerResponse.start_session = start_session  # type: ignore[attr-defined]
    SimpleSystemManagerResponse.terminate_session = terminate_session  # type: ignore[attr-defined]

    invocations: dict[str, dict] = {}
    moto_send, moto_invocation = SimpleSystemManagerResponse.send_command, SimpleSystemManagerResponse.get_command_invocation

    def send_command(self):  # type: ignore[no-untyped-def]
        request = json.loads(self.body)
        known = json.loads(hosts.read_text()) if hosts.exists() else {}
        (instance,) = request.get("InstanceIds") or [None]
        if instance not in known:
            return moto_send(self)
        script = "\n".join(request["Parameters"]["commands"])
        done = subprocess.run([sys.executable, "-m", "tests.support.ssm_host", json.dumps(known[instance])], input=script,
                              capture_output=True, text=True, check=True)
        ran = json.loads(done.stdout)
        command_id = str(uuid.uuid4())
        invocations[command_id] = {
            "CommandId": command_id, "InstanceId": instance, "DocumentName": request["DocumentName"],
            "Status": "Success" if ran["code"] == 0 else "Failed", "ResponseCode": ran["code"],
            "StandardOutputContent": ran["out"][:24000], "StandardErrorContent": ran["err"][:8000],
        }
        return ActionResult({"Command": {"CommandId": command_id, "DocumentName": request["DocumentName"],
                                         "InstanceIds": [instance], "Status": "Pending"}})

    def get_command_invocation(self):  # type: ignore[no-untyped-def]
        request = json.loads(self.body)
        if request.get("CommandId") in invocations:
            return ActionResult(invocations[request["CommandId"]])
        return moto_invocation(self)

    SimpleSystemManagerResponse.send_command = send_command  # type: ignore[method-assign]
    SimpleSystemManagerResponse.get_command_invocation = get_command_invocation  # type: ignore[method-assign]

    moto_submit = BatchResponse.submitjob

    def submit_job(self):  # type: ignore[no-untyped-def]
        with submits.open("a") as log:
            log.write(json.dumps(json.loads(self.body)) + "\n")
        return moto_submit(self)

    BatchResponse.submitjob = submit_job  # type: ignore[method-assign]

    def describe_jobs(self):  # type: ignore[no-untyped-def]
        wanted = self._get_param("jobs") or []
        parents = {j["jobId"]: j for j in self.batch_backend.describe_jobs([w.split("#")[0] for w in wanted])}
        found = []
        for job_id in wanted:
            parent_id, _, index = job_id.partition("#")
            parent = parents.get(parent_id)
            if parent is None:
                continue
            if not index:
                found.append(parent)
                continue
            container = dict(parent.get("container") or {})
            container["logStreamName"] = node_stream(parent["jobDefinition"], parent_id, int(index))
            found.append({**parent, "jobId": job_id, "container": container,
                          "nodeDetails": {"nodeIndex": int(index), "isMainNode": index == "0"}})
        return json.dumps({"jobs": found})

    BatchResponse.describejobs = describe_jobs  # type: ignore[method-assign]

    from moto.batch.models import JobDefinition

    moto_definition = JobDefinition.describe

    def describe_definition(self):  # type: ignore[no-untyped-def]
        result = moto_definition(self)
        if self.node_properties:
            result["nodeProperties"] = self.node_properties
        return result

    JobDefinition.describe = describe_definition  # type: ignore[method-assign]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    print(f"moto listening on {port}", flush=True)
    try:
        sys.stdin.read()  # until the harness closes our stdin
    finally:
        server.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), Path(sys.argv[5]), Path(sys.argv[6]))
