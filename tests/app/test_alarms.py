"""Alarms that notify: the deployment's SNS topic, every alarm's action, and the events mailed to it.

The sample events are written as AWS documents them (each cites its page); EventBridge's matching is moto's (a
rule and an SQS target in moto, the sample sent with PutEvents), the input transformer's text is rendered here
from the rule's InputPathsMap and InputTemplate as EventBridge documents it ("Transforming input").
"""

from __future__ import annotations

import json
import re
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.support import apps
from tests.support.helpers import config_with, resources, synth
from trainium_cdk.charts.node_health import NAME as NODE_HEALTH_NAME
from trainium_cdk.constructs.alerts import KARPENTER_USERNAME
from trainium_cdk.constructs.karpenter import KARPENTER_NAMESPACE, KARPENTER_SERVICE_ACCOUNT
from trainium_cdk.facts.names import TRAINING_NAMESPACE

ACCOUNT, PARTITION = "123456789012", "aws"
EMAIL = "ml-oncall@example.com"


def resolved(value: Any, region: str) -> Any:
    """A template value with the pseudo parameters of one account and region and Fn::Join worked out."""
    pseudo = {"AWS::Partition": PARTITION, "AWS::Region": region, "AWS::AccountId": ACCOUNT, "AWS::URLSuffix": "amazonaws.com"}
    if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in pseudo:
        return pseudo[value["Ref"]]
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(resolved(p, region) for p in parts)
    if isinstance(value, dict):
        return {k: resolved(v, region) for k, v in value.items()}
    if isinstance(value, list):
        return [resolved(v, region) for v in value]
    return value


def templates(result) -> dict[str, dict[str, Any]]:
    """Every template of the app, nested ones too, by file name."""
    return {p.name: json.loads(p.read_text()) for p in result.outdir.glob("*.template.json")}


def topic_reference(result) -> tuple[str, str]:
    """The network stack's topic: its logical id and the export name that other stacks import it by."""
    network = result.template_json("network")
    (topic_id,) = resources(network, "AWS::SNS::Topic")
    exports = [o["Export"]["Name"] for o in network.get("Outputs", {}).values()
               if o.get("Value") == {"Ref": topic_id} and "Export" in o]
    return topic_id, (exports[0] if exports else "")


def names_topic(value: Any, topic_id: str, export: str) -> bool:
    return value == {"Ref": topic_id} or value == {"Fn::ImportValue": export}


# -- every alarm of every variant ----------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(apps.VARIANTS))
def test_every_alarm_of_every_variant_notifies_the_deployment_topic(variant):
    result = apps.synthesized(variant)
    topic_id, export = topic_reference(result)
    alarms = {f"{name}/{k}": r["Properties"] for name, t in templates(result).items()
              for k, r in resources(t, "AWS::CloudWatch::Alarm").items()}
    # Neuron hardware errors and failed nodes (EKS), Neuron hardware errors (Batch, ParallelCluster), and
    # Karpenter's node removals where Karpenter is the capacity.
    assert len(alarms) >= 4, alarms
    for where, alarm in alarms.items():
        actions = alarm.get("AlarmActions", [])
        assert actions and all(names_topic(a, topic_id, export) for a in actions), (where, actions)
        assert alarm.get("ActionsEnabled", True) is not False, where


# -- the topic --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mailed():
    """Every backend, with an address to mail (cdk-nag on: a finding fails the synth)."""
    return synth(config_with(backends=apps.ALL_BACKENDS, notifications={"email": EMAIL}))


def test_topic_is_encrypted_with_its_own_rotating_key_and_refuses_plain_http(mailed):
    network = mailed.template_json("network")
    ((topic_id, topic),) = resources(network, "AWS::SNS::Topic").items()
    key_id = topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
    key = network["Resources"][key_id]
    assert key["Type"] == "AWS::KMS::Key" and key["Properties"]["EnableKeyRotation"] is True
    granted = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if "Service" in s["Principal"]]
    assert granted == [{
        "Effect": "Allow", "Action": ["kms:Decrypt", "kms:GenerateDataKey*"], "Resource": "*",
        "Principal": {"Service": ["cloudwatch.amazonaws.com", "events.amazonaws.com"]},
    }]
    ((policy),) = resources(network, "AWS::SNS::TopicPolicy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    (deny,) = [s for s in statements if s["Effect"] == "Deny"]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert policy["Properties"]["Topics"] == [{"Ref": topic_id}]


def test_only_this_deployments_alarms_and_rules_may_publish(mailed):
    """Two services, each for sources of this account named after this deployment's stacks (confused deputy)."""
    network = mailed.template_json("network")
    ((policy),) = resources(network, "AWS::SNS::TopicPolicy").values()
    region = mailed.config.region
    allowed = {
        s["Principal"]["Service"]: resolved(s["Condition"], region)
        for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"
    }
    stacks = [s.stack_name for s in mailed.stacks.stacks if s is not mailed.stacks.storage]
    assert set(allowed) == {"cloudwatch.amazonaws.com", "events.amazonaws.com"}
    assert allowed["cloudwatch.amazonaws.com"] == {
        "StringEquals": {"aws:SourceAccount": ACCOUNT},
        "ArnLike": {"aws:SourceArn": [f"arn:aws:cloudwatch:{region}:{ACCOUNT}:alarm:{s}-*" for s in stacks]},
    }
    assert allowed["events.amazonaws.com"] == {
        "StringEquals": {"aws:SourceAccount": ACCOUNT},
        "ArnLike": {"aws:SourceArn": [f"arn:aws:events:{region}:{ACCOUNT}:rule/{s}-*" for s in stacks]},
    }
    # and every alarm and rule of the deployment is such a source: CloudFormation names them <stack>-<id>-<suffix>
    for stack in mailed.stacks.stacks:
        template = mailed.assembly.get_stack_by_name(stack.stack_name).template
        named = [r["Properties"].get("AlarmName") or r["Properties"].get("Name")
                 for r in template["Resources"].values() if r["Type"] in ("AWS::CloudWatch::Alarm", "AWS::Events::Rule")]
        assert named == [None] * len(named), stack.stack_name


def test_the_configured_address_is_subscribed(mailed):
    network = mailed.template_json("network")
    (topic_id,) = resources(network, "AWS::SNS::Topic")
    subscriptions = [r["Properties"] for r in resources(network, "AWS::SNS::Subscription").values()]
    assert subscriptions == [{"Protocol": "email", "Endpoint": EMAIL, "TopicArn": {"Ref": topic_id}}]
    assert "AlarmTopicArn" in network["Outputs"]


def test_an_existing_topic_is_used_as_it_is():
    arn = f"arn:aws:sns:us-west-2:{ACCOUNT}:team-alarms"
    result = synth(config_with(backends=["eks", "batch"], notifications={"topic_arn": arn}), nag=False)
    for name, template in templates(result).items():
        assert not resources(template, "AWS::SNS::Topic") and not resources(template, "AWS::SNS::TopicPolicy"), name
        assert not [k for k in resources(template, "AWS::KMS::Key").values()
                    if k["Properties"]["Description"].startswith("SNS")], name
        for alarm in resources(template, "AWS::CloudWatch::Alarm").values():
            assert alarm["Properties"]["AlarmActions"] == [arn]
        for rule in resources(template, "AWS::Events::Rule").values():
            if rule["Properties"].get("Description", "").endswith("to the alarm topic"):
                assert [t["Arn"] for t in rule["Properties"]["Targets"]] == [arn]


# -- bad input, as `cdk synth` (app.py) reads the config ------------------------------------------------------


@pytest.mark.parametrize(
    ("notifications", "message"),
    [
        ({"email": "ml-oncall"}, "notifications.email = 'ml-oncall': one e-mail address"),
        ({"email": "a@example.com, b@example.com"}, "notifications.email = 'a@example.com, b@example.com': one e-mail"),
        ({"topic_arn": "team-alarms"}, "notifications.topic_arn = 'team-alarms': an SNS topic ARN"),
        ({"topic_arn": f"arn:aws:sns:us-east-1:{ACCOUNT}:team-alarms"},
         f"notifications.topic_arn = 'arn:aws:sns:us-east-1:{ACCOUNT}:team-alarms': a topic in the config's region us-west-2"),
        ({"mail": EMAIL}, "notifications.mail"),
    ],
)
def test_bad_notifications_stop_before_any_template(tmp_path, notifications, message):
    from tests.app.test_app import run_app

    config = tmp_path / "alarms.yaml"
    config.write_text("backends: [eks]\nnotifications:\n" + "".join(f"  {k}: {v}\n" for k, v in notifications.items()))
    out = tmp_path / "out"
    proc = run_app(out, {"config": str(config)})
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not list(out.glob("*.template.json"))


# -- EventBridge rules: each pattern matches its event and not a neighbour -------------------------------------


def rule(template: dict[str, Any], description_start: str) -> dict[str, Any]:
    (found,) = [r["Properties"] for r in resources(template, "AWS::Events::Rule").values()
                if r["Properties"].get("Description", "").startswith(description_start)]
    return found


def delivered(pattern: dict[str, Any], events: list[dict[str, Any]], region: str) -> list[str]:
    """The ids of ``events`` that an EventBridge rule with ``pattern`` delivers (moto's EventBridge and SQS)."""
    with mock_aws():
        sqs = boto3.client("sqs", region_name=region)
        bus = boto3.client("events", region_name=region)
        queue = sqs.create_queue(QueueName="mail")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        bus.put_rule(Name="alarm", EventPattern=json.dumps(pattern))
        bus.put_targets(Rule="alarm", Targets=[{"Id": "mail", "Arn": queue_arn}])
        for event in events:
            bus.put_events(Entries=[{
                "Source": event["source"], "DetailType": event["detail-type"], "Detail": json.dumps(event["detail"]),
                "Resources": event["resources"],
            }])
        received = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
        details = [json.loads(m["Body"])["detail"] for m in received]
        return [d.get("jobId") or d.get("eventTypeCode") or d.get("capacity-reservation-id") or d["alarmName"]
                for d in details]


def mail(target: dict[str, Any], event: dict[str, Any]) -> str:
    """The text EventBridge sends for ``event`` through the target's input transformer: each <name> of the
    template replaced by the value at its path (a string as it is, anything else as JSON)."""
    transformer = target["InputTransformer"]

    def at(path: str) -> Any:
        value: Any = event
        for part in path.removeprefix("$.").split("."):
            name, _, index = part.partition("[")
            value = value[name]
            if index:
                value = value[int(index.rstrip("]"))]
        return value

    values = {name: at(path) for name, path in transformer["InputPathsMap"].items()}
    text = transformer["InputTemplate"]
    for name, value in values.items():
        text = text.replace(f"<{name}>", value if isinstance(value, str) else json.dumps(value))
    assert not re.search(r"<[A-Za-z0-9_-]+>", text), text
    return "\n".join(json.loads(line) for line in text.splitlines())


def batch_event(job_queue: str, status: str, job_id: str) -> dict[str, Any]:
    """A "Batch Job State Change" event as the AWS Batch User Guide shows it ("Job state change events"),
    with the status and queue of the case and the reason Batch gives a failed job."""
    return {
        "version": "0", "id": "c8f9c4b5-76e5-d76a-f980-7011e206042b", "detail-type": "Batch Job State Change",
        "source": "aws.batch", "account": ACCOUNT, "time": "2026-11-26T23:36:40Z", "region": "us-west-2",
        "resources": [f"arn:aws:batch:us-west-2:{ACCOUNT}:job/{job_id}"],
        "detail": {
            "jobArn": f"arn:aws:batch:us-west-2:{ACCOUNT}:job/{job_id}", "jobName": "llama-pretrain",
            "jobId": job_id, "jobQueue": job_queue, "status": status,
            "statusReason": "Essential container in task exited", "attempts": [], "createdAt": 1795734200058,
            "retryStrategy": {"attempts": 2, "evaluateOnExit": []}, "dependsOn": [],
            "jobDefinition": f"arn:aws:batch:us-west-2:{ACCOUNT}:job-definition/trainium-batch-train:1",
            "parameters": {}, "tags": {}, "propagateTags": False, "platformCapabilities": ["EC2"],
        },
    }


def test_a_failed_job_of_a_deployment_queue_is_mailed_and_nothing_else(mailed):
    batch = mailed.template_json("batch")
    found = rule(batch, "AWS Batch jobs")
    pattern = resolved(found["EventPattern"], mailed.config.region)
    ours = (f"arn:aws:batch:us-west-2:{ACCOUNT}:job-queue/{mailed.config.stack_name('batch')}-"
            f"{mailed.config.compute_groups[0].name}")
    # The group's queue and the CPU queue of the recipes' data jobs.
    cpu = f"arn:aws:batch:us-west-2:{ACCOUNT}:job-queue/{mailed.config.stack_name('batch')}_cpu"
    assert pattern["detail"]["jobQueue"] == [ours, cpu]
    samples = [
        batch_event(ours, "FAILED", "4c7599ae-0a82-49aa-ba5a-4727fcce14a8"),
        batch_event(ours, "SUCCEEDED", "11111111-0a82-49aa-ba5a-4727fcce14a8"),
        batch_event(f"arn:aws:batch:us-west-2:{ACCOUNT}:job-queue/someone-else", "FAILED",
                    "22222222-0a82-49aa-ba5a-4727fcce14a8"),
        batch_event(ours, "RUNNING", "33333333-0a82-49aa-ba5a-4727fcce14a8"),
    ]
    assert delivered(pattern, samples, mailed.config.region) == ["4c7599ae-0a82-49aa-ba5a-4727fcce14a8"]
    (target,) = found["Targets"]
    text = mail(target, samples[0])
    assert text.splitlines() == [
        "AWS Batch job llama-pretrain (4c7599ae-0a82-49aa-ba5a-4727fcce14a8) FAILED.",
        "Reason: Essential container in task exited",
        f"Queue: {ours}",
        "Its logs: trn logs 4c7599ae-0a82-49aa-ba5a-4727fcce14a8 --backend batch",
    ]


def health_event(service: str, category: str, code: str) -> dict[str, Any]:
    """An "AWS Health Event" as the AWS Health User Guide shows it ("Reference: AWS Health events Amazon
    EventBridge schema", its EC2 sample), with the service, category and event type of the case."""
    return {
        "version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602", "detail-type": "AWS Health Event",
        "source": "aws.health", "account": ACCOUNT, "time": "2026-11-26T09:01:22Z", "region": "us-west-2",
        "resources": ["i-abcd1111"],
        "detail": {
            "eventArn": f"arn:aws:health:us-west-2::event/{service}/{code}/{code}_90353408594353980",
            "service": service, "eventTypeCode": code, "eventTypeCategory": category,
            "eventScopeCode": "ACCOUNT_SPECIFIC", "communicationId": "1234abc01232a4012345678-1",
            "startTime": "Fri, 04 Dec 2026 06:00:00 GMT", "endTime": "Fri, 04 Dec 2026 08:00:00 GMT",
            "lastUpdatedTime": "Thu, 26 Nov 2026 09:01:22 GMT", "statusCode": "upcoming", "eventRegion": "us-west-2",
            "eventDescription": [{"language": "en_US", "latestDescription": "An instance is scheduled for a reboot."}],
            "affectedEntities": [{"entityValue": "i-abcd1111"}], "affectedAccount": ACCOUNT,
        },
    }


def test_ec2_scheduled_changes_are_mailed_once_per_deployment(mailed):
    rules = [rule(t, "AWS Health") for n, t in templates(mailed).items() if any(
        r["Properties"].get("Description", "").startswith("AWS Health") for r in resources(t, "AWS::Events::Rule").values())]
    assert len(rules) == 1  # the network stack's, whatever the backends
    (found,) = rules
    samples = [
        health_event("EC2", "scheduledChange", "AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED"),
        health_event("EC2", "issue", "AWS_EC2_OPERATIONAL_ISSUE"),
        health_event("RDS", "scheduledChange", "AWS_RDS_MAINTENANCE_SCHEDULED"),
    ]
    assert delivered(resolved(found["EventPattern"], "us-west-2"), samples, "us-west-2") == [
        "AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED"]
    (target,) = found["Targets"]
    first = mail(target, samples[0]).splitlines()[0]
    assert first == ("AWS Health: AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED (scheduledChange) in us-west-2, "
                     "from Fri, 04 Dec 2026 06:00:00 GMT.")


def alarm_event(alarm: str, state: str, previous: str) -> dict[str, Any]:
    """A "CloudWatch Alarm State Change" event as the CloudWatch User Guide shows one ("Alarm events and
    EventBridge", its metric alarm sample), for the alarm and states of the case."""
    return {
        "version": "0", "id": "2dde0eb1-528b-d2d5-9ca6-6d590caf2329", "detail-type": "CloudWatch Alarm State Change",
        "source": "aws.cloudwatch", "account": ACCOUNT, "time": "2026-11-26T12:00:00Z", "region": "us-west-2",
        "resources": [f"arn:aws:cloudwatch:us-west-2:{ACCOUNT}:alarm:{alarm}"],
        "detail": {
            "alarmName": alarm,
            "state": {"value": state, "reason": "Threshold Crossed: 1 datapoint [94.2 (26/11/26 11:59:00)] was "
                      "greater than the threshold (90.0).", "timestamp": "2026-11-26T12:00:00.000+0000"},
            "previousState": {"value": previous, "reason": "", "timestamp": "2026-11-26T11:00:00.000+0000"},
            "configuration": {"metrics": [], "description": ""},
        },
    }


def test_parallelclusters_own_alarms_are_mailed():
    """ParallelCluster's head node alarms (named <cluster>-HeadNode-<metric>: ParallelCluster User Guide, "Amazon
    CloudWatch alarms for cluster metrics") carry no action and live in its own stack: the deployment's rule mails
    each of this cluster's as it goes to ALARM, and nothing else."""
    result = apps.synthesized("trn1.32xlarge")
    stack = result.template_json("parallelcluster")
    found = rule(stack, "ParallelCluster alarms")
    topic_id, export = topic_reference(result)
    (target,) = found["Targets"]
    assert names_topic(target["Arn"], topic_id, export), target["Arn"]
    ((slurm),) = [r["Properties"] for r in resources(stack, "Custom::PclusterCluster").values()]
    cluster = slurm["ClusterName"]  # the name ParallelCluster gives its alarms
    theirs = [f"{cluster}-HeadNode-{metric}" for metric in ("Health", "Cpu", "Mem", "Disk", "ClustermgtdHeartbeat")]
    samples = [
        *(alarm_event(name, "ALARM", "OK") for name in theirs),
        alarm_event(f"{cluster}-HeadNode", "ALARM", "OK"),  # the composite: one of the above again
        alarm_event(f"{cluster}-HeadNode-Cpu", "OK", "ALARM"),
        alarm_event("another-cluster-HeadNode-Cpu", "ALARM", "OK"),
    ]
    assert sorted(delivered(resolved(found["EventPattern"], "us-west-2"), samples, "us-west-2")) == sorted(theirs)
    assert mail(target, samples[1]).splitlines() == [
        f"ParallelCluster {cluster}: alarm {cluster}-HeadNode-Cpu is ALARM.",
        "Reason: Threshold Crossed: 1 datapoint [94.2 (26/11/26 11:59:00)] was greater than the threshold (90.0).",
        "What each alarm watches and what to do: ParallelCluster User Guide, \"Amazon CloudWatch alarms for cluster "
        "metrics\"; reach the head node with the stack's HeadNodeSession output.",
    ]


# -- Karpenter's interruptions of work, from the audit log -------------------------------------------------------


def audit_event(verb: str, username: str, resource: str, name: str, *, api_group: str = "", namespace: str | None = None,
                subresource: str | None = None) -> dict[str, Any]:
    """An audit.k8s.io/v1 Event at level Metadata, as the Kubernetes "Auditing" page shows one and EKS writes it to
    the control-plane log group's kube-apiserver-audit streams (objectRef: kubernetes/apiserver pkg/apis/audit/v1
    types.go, ObjectReference)."""
    group_path = f"/apis/{api_group}/v1" if api_group else "/api/v1"
    where = f"/namespaces/{namespace}" if namespace else ""
    object_ref = {"resource": resource, "name": name, "apiGroup": api_group, "apiVersion": "v1",
                  **({"namespace": namespace} if namespace else {}), **({"subresource": subresource} if subresource else {})}
    return {
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
        "auditID": "8d2ed1a4-1c1f-4f0a-9c35-2b1d5e0f1a11", "stage": "ResponseComplete",
        "requestURI": f"{group_path}{where}/{resource}/{name}" + (f"/{subresource}" if subresource else ""),
        "verb": verb, "user": {"username": username, "groups": ["system:serviceaccounts", "system:authenticated"]},
        "sourceIPs": ["10.0.12.34"], "userAgent": "karpenter", "objectRef": object_ref,
        "responseStatus": {"metadata": {}, "code": 201 if verb == "create" else 200},
        "requestReceivedTimestamp": "2026-11-26T10:00:00.000000Z", "stageTimestamp": "2026-11-26T10:00:00.020000Z",
    }


def matches_filter(pattern: str, event: dict[str, Any]) -> bool:
    """CloudWatch Logs' JSON filter syntax, as a metric filter evaluates it: ``{ <expression> }`` where an expression
    is ``($.a.b = "v")``, and expressions join with ``&&`` and ``||`` in parentheses (CloudWatch Logs User Guide,
    "Filter pattern syntax for metric filters": "Using metric filters to match terms in JSON log events"; ``&&``
    binds before ``||``). A selector whose field is missing does not match."""
    body = pattern.strip()
    assert body.startswith("{") and body.endswith("}"), pattern
    token = r'\(\$\.[\w.]+ = "[^"*]*"\)|&&|\|\||\(|\)'
    tokens = re.findall(token, body[1:-1])
    assert not re.sub(token, "", body[1:-1]).strip(), pattern  # nothing else: no wildcard, no other operator

    def term(token: str) -> bool:
        path, expected = re.fullmatch(r'\(\$\.([\w.]+) = "([^"*]*)"\)', token).groups()
        value: Any = event
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value == expected

    position = 0

    def disjunction() -> bool:
        nonlocal position
        result = conjunction()
        while position < len(tokens) and tokens[position] == "||":
            position += 1
            result = conjunction() or result
        return result

    def conjunction() -> bool:
        nonlocal position
        result = primary()
        while position < len(tokens) and tokens[position] == "&&":
            position += 1
            result = primary() and result
        return result

    def primary() -> bool:
        nonlocal position
        token = tokens[position]
        position += 1
        if token == "(":
            result = disjunction()
            assert tokens[position] == ")", pattern
            position += 1
            return result
        return term(token)

    verdict = disjunction()
    assert position == len(tokens), pattern
    return verdict


KARPENTER = KARPENTER_USERNAME.format(namespace=KARPENTER_NAMESPACE, service_account=KARPENTER_SERVICE_ACCOUNT)
CHECKER = f"system:serviceaccount:kube-system:{NODE_HEALTH_NAME}"
NODECLAIM, NODE = "train-abcde", "ip-10-0-1-23.us-west-2.compute.internal"
POD = "llama-train-worker-3"


def karpenter_removal(*, drained: list[str], force: bool = False) -> list[dict[str, Any]]:
    """What Karpenter's service account writes while it removes a node, in the audit log: whatever the reason
    (Drifted, Underutilized, Empty; an interruption-queue message; node repair), the NodeClaim's DisruptionReason
    condition (a status patch) or the repair's termination-deadline annotation (a patch), the NodeClaim's delete,
    the node's taint, then the drain of each active pod: an eviction, or, past the termination deadline (which repair
    sets to now), a delete (kubernetes-sigs/karpenter pkg/controllers/disruption/queue.go, node/health/controller.go,
    node/termination/terminator/eviction.go). ``drained`` are the node's active pods as (namespace/name)."""
    events = [
        audit_event("patch", KARPENTER, "nodeclaims", NODECLAIM, api_group="karpenter.sh", subresource="status"),
        audit_event("patch", KARPENTER, "nodeclaims", NODECLAIM, api_group="karpenter.sh"),
        audit_event("delete", KARPENTER, "nodeclaims", NODECLAIM, api_group="karpenter.sh"),
        audit_event("patch", KARPENTER, "nodes", NODE),
    ]
    for pod in drained:
        namespace, name = pod.split("/")
        events.append(audit_event("delete", KARPENTER, "pods", name, namespace=namespace) if force else
                      audit_event("create", KARPENTER, "pods", name, namespace=namespace, subresource="eviction"))
    return [*events, audit_event("delete", KARPENTER, "nodes", NODE)]


DAEMONS = ["kube-system/aws-node-x7k2p", "kube-system/trainium-node-health-trn1-32xlarge-5qv8d", "kube-system/neuron-device-plugin-h2m4c"]


@pytest.mark.parametrize("removal, mailed", [
    # Empty consolidation after a job: its pods finished (terminal pods are not drained); only DaemonSet pods go.
    (karpenter_removal(drained=DAEMONS), False),
    # Underutilized or Drifted with a job running; an interruption-queue message (Spot, rebalance, scheduled change,
    # capacity block end) with a job running: the job's pods are evicted.
    (karpenter_removal(drained=[*DAEMONS, f"{TRAINING_NAMESPACE}/{POD}"]), True),
    # Node repair (AcceleratedHardwareReady False for 10 minutes) with a job running: its pods are deleted.
    (karpenter_removal(drained=[f"{TRAINING_NAMESPACE}/{POD}", *DAEMONS], force=True), True),
    # Node repair of an idle node: nothing interrupted (the FailedNodes alarm has mailed the bad condition).
    (karpenter_removal(drained=DAEMONS, force=True), False),
    # The node health checker deletes a Karpenter node that failed its check: Karpenter replaces it.
    ([audit_event("patch", CHECKER, "nodes", NODE, subresource="status"), audit_event("get", CHECKER, "nodes", NODE),
      audit_event("delete", CHECKER, "nodes", NODE)], True),
    # Someone else's evictions and deletes of training pods (kubectl drain, a finished job's cleanup).
    ([audit_event("create", "kubernetes-admin", "pods", POD, namespace=TRAINING_NAMESPACE, subresource="eviction"),
      audit_event("delete", "kubernetes-admin", "pods", POD, namespace=TRAINING_NAMESPACE),
      audit_event("delete", "kubernetes-admin", "nodes", NODE)], False),
    # Karpenter reading or binding training pods.
    ([audit_event("get", KARPENTER, "pods", POD, namespace=TRAINING_NAMESPACE),
      audit_event("patch", KARPENTER, "pods", POD, namespace=TRAINING_NAMESPACE, subresource="status")], False),
], ids=["empty", "drifted-underutilized-or-interrupted-with-a-job", "repair-with-a-job", "repair-of-an-idle-node",
        "failed-health-check", "someone-else", "karpenter-reads"])
def test_karpenter_mails_only_removals_that_interrupt_work(karpenter_filter, removal, mailed):
    pattern, _ = karpenter_filter
    assert any(matches_filter(pattern, event) for event in removal) is mailed, [
        (e["verb"], e["objectRef"]) for e in removal if matches_filter(pattern, e)]


@pytest.fixture(scope="module")
def karpenter_filter():
    result = apps.synthesized("trn1.32xlarge")  # Karpenter, the default capacity
    eks = result.template_json("eks")
    ((metric_filter),) = resources(eks, "AWS::Logs::MetricFilter").values()
    groups = resources(eks, "AWS::Logs::LogGroup")
    assert groups[metric_filter["Properties"]["LogGroupName"]["Ref"]]["Properties"]["LogGroupName"].startswith("/aws/eks/")
    return metric_filter["Properties"]["FilterPattern"], (eks, metric_filter)


def test_the_karpenter_alarm_counts_its_filters_matches(karpenter_filter):
    _, (eks, metric_filter) = karpenter_filter
    (transformation,) = metric_filter["Properties"]["MetricTransformations"]
    alarms = [r["Properties"] for r in resources(eks, "AWS::CloudWatch::Alarm").values()
              if r["Properties"].get("MetricName") == transformation["MetricName"]]
    assert [(a["Namespace"], a["Statistic"], a["Threshold"]) for a in alarms] == [
        (transformation["MetricNamespace"], "Sum", 0)]


def test_managed_node_groups_have_no_karpenter_alarm():
    result = apps.synthesized("trn1n.32xlarge+trn1.2xlarge")  # eks.capacity: managed
    assert not resources(result.template_json("eks"), "AWS::Logs::MetricFilter")


def capacity_block_event(detail_type: str, block: str) -> dict[str, Any]:
    """An EC2 Capacity Block event as the EC2 User Guide shows it ("Monitor Capacity Blocks using EventBridge")."""
    return {
        "version": "0", "id": "4d0f7a36-2f1a-4f4c-9e1e-6a1c7d3b5e01", "detail-type": detail_type, "source": "aws.ec2",
        "account": ACCOUNT, "time": "2026-12-09T10:50:00Z", "region": "us-west-2",
        "resources": [f"arn:aws:ec2:us-west-2:{ACCOUNT}:capacity-reservation/{block}"],
        "detail": {"capacity-reservation-id": block, "end-date": "2026-12-09T11:30:00.000Z"},
    }


def test_a_capacity_block_s_start_and_expiration_warning_are_mailed_in_both_spellings():
    """Issue 47: EC2 sends "Delivered" at a block's start and "Expiration Warning" 40 minutes before its end; the
    guide spells them with and without "Reservation". This deployment's blocks only; nothing without a block."""
    result = synth(config_with(**apps.CAPACITY), nag=False)
    found = rule(result.template_json("network"), "EC2 Capacity Blocks")
    ours, theirs = apps.CAPACITY_BLOCK_ID, "cr-0ccccccccccccccccc"
    samples = [
        capacity_block_event("Capacity Block Reservation Expiration Warning", ours),
        capacity_block_event("Capacity Block Delivered", ours),
        capacity_block_event("Capacity Block Reservation Delivered", theirs),
        capacity_block_event("EC2 Capacity Reservation Active", ours),
    ]
    assert delivered(resolved(found["EventPattern"], "us-west-2"), samples, "us-west-2") == [ours, ours]
    (target,) = found["Targets"]
    assert mail(target, samples[0]).splitlines()[0] == (
        f"EC2 Capacity Block {ours}: Capacity Block Reservation Expiration Warning (the block ends "
        "2026-12-09T11:30:00.000Z).")
    # The reserved (not block) group's reservation is no block: not matched.
    assert found["EventPattern"]["detail"] == {"capacity-reservation-id": [ours]}
    assert not [r for r in resources(synth(config_with(), nag=False).template_json("network"), "AWS::Events::Rule")
                .values() if r["Properties"].get("Description", "").startswith("EC2 Capacity Blocks")]
