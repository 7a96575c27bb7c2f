"""Alarms and events that notify: the deployment's SNS topic, and the EventBridge rules and log metric that feed it.

- :class:`AlarmTopic`: one SNS topic per deployment (the network stack's), encrypted with a KMS key of its own,
  an optional e-mail subscription; or an existing topic by ARN. Every CloudWatch alarm of the deployment names it
  (:func:`alarm_to`).
- :func:`notify`: an EventBridge rule to the topic, with an input transformer so that the mail reads as a sentence:
  AWS Batch jobs that FAILED in the deployment's queues (:func:`batch_job_failed`), EC2 scheduled changes from
  AWS Health (:data:`EC2_SCHEDULED_CHANGE`), the alarms ParallelCluster creates for its head node
  (:func:`parallelcluster_alarms`).
- :class:`KarpenterInterruptions`: Karpenter emits Kubernetes events and logs, no EventBridge events. The EKS
  audit log (in the control-plane log group the EKS stack creates, so it exists before any metric filter on it)
  records what Karpenter's service account does. A NodeClaim delete is every removal, for every reason (Empty and
  Underutilized consolidation, Drifted, expiry, the interruption queue, node repair), so it mails after every job.
  What interrupts work is the drain: Karpenter evicts each active pod of a node it removes (pods/eviction), or deletes
  it once the node's termination deadline has passed (node repair sets it to now); finished pods and an empty node
  are not drained. A metric filter counts those evictions and deletes of training pods, and the node health
  checker's deletes of nodes that failed its check; an alarm mails. The application log group of Container Insights
  would carry Karpenter's own messages with the reason, but its agent creates that group at run time, after the
  stack: a metric filter on it fails the deploy, and creating it in the stack fails on clusters whose agent already
  did.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Annotations, Aws, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from trainium_cdk.facts.names import OUTPUT_HEAD_NODE_SESSION

# The services that publish to the topic: CloudWatch for alarm actions, EventBridge for rule targets.
ALARM_PUBLISHER = "cloudwatch.amazonaws.com"
EVENT_PUBLISHER = "events.amazonaws.com"
# What a service needs of an encrypted topic's key to publish (SNS Developer Guide, "Key management": "Enable
# compatibility between event sources from AWS services and encrypted topics").
KEY_ACTIONS = ("kms:Decrypt", "kms:GenerateDataKey*")
# A deleted key waits this long before it is gone; the topic it encrypts is deleted with it.
KEY_PENDING_WINDOW = Duration.days(7)

# AWS Batch "Batch Job State Change" events (AWS Batch User Guide, "Job state change events"): detail.status and
# detail.jobQueue (the queue's ARN).
BATCH_SOURCE, BATCH_JOB_STATE_CHANGE = "aws.batch", "Batch Job State Change"
# AWS Health events about EC2 (AWS Health User Guide, "Reference: AWS Health events Amazon EventBridge schema"):
# detail.service EC2 and detail.eventTypeCategory scheduledChange are the maintenance, retirement, reboot and
# stop notices of instances. Health names the affected instances in detail.affectedEntities, not in a field a
# pattern can match against this deployment's instances (unknown at synth): every EC2 scheduled change of the
# account in this region is mailed.
EC2_SCHEDULED_CHANGE = events.EventPattern(
    source=["aws.health"], detail_type=["AWS Health Event"],
    detail={"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
)

# EC2 Capacity Blocks (EC2 User Guide, "Monitor Capacity Blocks using EventBridge"): "Delivered" when a block starts,
# "Expiration Warning" 40 minutes before it ends (its instances start terminating 10 minutes later); detail names the
# block (capacity-reservation-id) and its end-date. The guide spells the detail type with "Reservation" in its
# examples and without it in its headings: both are matched.
CAPACITY_BLOCK_EVENTS = (
    "Capacity Block Reservation Delivered", "Capacity Block Delivered",
    "Capacity Block Reservation Expiration Warning", "Capacity Block Expiration Warning",
)


def capacity_block_events(reservation_ids: Sequence[str]) -> events.EventPattern:
    """A block of ``reservation_ids`` started, or ends in 40 minutes."""
    return events.EventPattern(source=["aws.ec2"], detail_type=list(CAPACITY_BLOCK_EVENTS),
                               detail={"capacity-reservation-id": sorted(reservation_ids)})


def capacity_block_message() -> events.RuleTargetInput:
    field = events.EventField.from_path
    block = field("$.detail.capacity-reservation-id")
    return events.RuleTargetInput.from_multiline_text("\n".join((
        f"EC2 Capacity Block {block}: {field('$.detail-type')} (the block ends {field('$.detail.end-date')}).",
        "Delivered: the block is active: its nodes can start (trn doctor shows its state).",
        "Expiration Warning: EC2 terminates the block's instances from 30 minutes before its end, 10 minutes from "
        "this warning: a job still running loses what it did since its last checkpoint.",
    )))


# ParallelCluster creates CloudWatch alarms for the head node and "doesn't configure alarm actions" (ParallelCluster
# User Guide, "Amazon CloudWatch alarms for cluster metrics": <cluster>-HeadNode-Health, -Cpu, -Mem, -Disk and, from
# 3.15 with CloudWatch logging, -ClustermgtdHeartbeat; the composite <cluster>-HeadNode is red when any is); its
# configuration has no action to set, and the alarms live in ParallelCluster's own stack. CloudWatch sends every
# alarm's state change to EventBridge ("CloudWatch Alarm State Change", detail.alarmName and detail.state: CloudWatch
# User Guide, "Alarm events and EventBridge"): a rule mails the cluster's alarms as they go to ALARM (the composite
# left out: it repeats one of them).
CLOUDWATCH_SOURCE, ALARM_STATE_CHANGE = "aws.cloudwatch", "CloudWatch Alarm State Change"
PARALLELCLUSTER_HEAD_NODE_ALARMS = "{cluster}-HeadNode-"

# A service account's identity in the audit log (Karpenter's: constructs/karpenter.py installs it; the node health
# checker's: charts/node_health.py).
KARPENTER_USERNAME = SERVICE_ACCOUNT_USERNAME = "system:serviceaccount:{namespace}:{service_account}"
KARPENTER_METRIC_NAMESPACE = "TrainiumCDK/Karpenter"
KARPENTER_PERIOD = Duration.minutes(5)


def batch_job_failed(queue_arns: Sequence[str]) -> events.EventPattern:
    """A job of one of ``queue_arns`` entered FAILED (after its last attempt: Batch retries before FAILED)."""
    return events.EventPattern(
        source=[BATCH_SOURCE], detail_type=[BATCH_JOB_STATE_CHANGE],
        detail={"status": ["FAILED"], "jobQueue": list(queue_arns)},
    )


def batch_job_failed_message() -> events.RuleTargetInput:
    field = events.EventField.from_path
    return events.RuleTargetInput.from_multiline_text("\n".join((
        f"AWS Batch job {field('$.detail.jobName')} ({field('$.detail.jobId')}) FAILED.",
        f"Reason: {field('$.detail.statusReason')}",
        f"Queue: {field('$.detail.jobQueue')}",
        f"Its logs: trn logs {field('$.detail.jobId')} --backend batch",
    )))


def ec2_scheduled_change_message() -> events.RuleTargetInput:
    field = events.EventField.from_path
    return events.RuleTargetInput.from_multiline_text("\n".join((
        f"AWS Health: {field('$.detail.eventTypeCode')} ({field('$.detail.eventTypeCategory')}) in "
        f"{field('$.region')}, from {field('$.detail.startTime')}.",
        # One instance (EventBridge reads array indices in a path); the whole list, an array, would not fit in the
        # mail's quoted line (EventBridge User Guide, "Amazon EventBridge input transformation").
        f"Instance: {field('$.resources[0]')} (the first named; the event lists every one)",
        f"Event: {field('$.detail.eventArn')}",
        "A node under maintenance or retirement stops or reboots: move its jobs or let the scheduler replace it "
        "(AWS Health dashboard, Scheduled changes).",
    )))


def parallelcluster_alarms(cluster_name: str) -> events.EventPattern:
    """ParallelCluster's head node alarms of ``cluster_name`` going to ALARM."""
    return events.EventPattern(
        source=[CLOUDWATCH_SOURCE], detail_type=[ALARM_STATE_CHANGE],
        detail={"alarmName": events.Match.prefix(PARALLELCLUSTER_HEAD_NODE_ALARMS.format(cluster=cluster_name)),
                "state": {"value": ["ALARM"]}},
    )


def parallelcluster_alarm_message(cluster_name: str) -> events.RuleTargetInput:
    field = events.EventField.from_path
    return events.RuleTargetInput.from_multiline_text("\n".join((
        f"ParallelCluster {cluster_name}: alarm {field('$.detail.alarmName')} is {field('$.detail.state.value')}.",
        f"Reason: {field('$.detail.state.reason')}",
        "What each alarm watches and what to do: ParallelCluster User Guide, \"Amazon CloudWatch alarms for cluster "
        f"metrics\"; reach the head node with the stack's {OUTPUT_HEAD_NODE_SESSION} output.",
    )))


class AlarmTopic(Construct):
    """The deployment's SNS topic for alarms and events.

    :param topic_arn: an existing topic to use instead; its policies are its owner's (they must let
        cloudwatch.amazonaws.com and events.amazonaws.com publish). Default: a new topic.
    :param email: an address to subscribe (SNS mails it a confirmation link). Default: none.

    A new topic's policy admits CloudWatch and EventBridge for the alarms and rules of the stacks given to
    :meth:`admit` only, in this account (aws:SourceAccount, aws:SourceArn: the confused-deputy guidance of the IAM
    User Guide, as constructs/service_trust.py).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        topic_arn: str | None = None,
        email: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.key: kms.Key | None = None
        if topic_arn is not None:
            self.topic: sns.ITopic = sns.Topic.from_topic_arn(self, "Topic", topic_arn)
        else:
            self.key = kms.Key(
                self, "Key", description=f"SNS alarm topic of {Stack.of(self).stack_name}", enable_key_rotation=True,
                pending_window=KEY_PENDING_WINDOW, removal_policy=RemovalPolicy.DESTROY,
            )
            self.topic = sns.Topic(self, "Topic", display_name="trainium-cdk alarms", master_key=self.key, enforce_ssl=True)
            # The key encrypts this topic only. The services get no source conditions on it: EventBridge documents
            # aws:SourceArn and aws:SourceAccount as unsupported in a key policy (EventBridge User Guide, "Amazon SNS
            # permissions"), and the topic policy is where SNS checks who publishes.
            self.key.add_to_resource_policy(iam.PolicyStatement(
                principals=[iam.ServicePrincipal(ALARM_PUBLISHER), iam.ServicePrincipal(EVENT_PUBLISHER)],
                actions=list(KEY_ACTIONS), resources=["*"],
            ))
        if email is not None:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))

    def admit(self, stack_names: Sequence[str]) -> None:
        """Let the alarms and rules of these stacks publish to a new topic (an existing one keeps its owner's
        policy). CloudFormation names an alarm or rule it names itself ``<stack>-<logical id>-<suffix>``; the
        names are the stacks' as deployed (a pipeline stage prefixes its own)."""
        if not isinstance(self.topic, sns.Topic):
            return
        stack = Stack.of(self)
        where = f"{stack.region}:{stack.account}"
        sources = {
            ALARM_PUBLISHER: [f"arn:{Aws.PARTITION}:cloudwatch:{where}:alarm:{name}-*" for name in stack_names],
            EVENT_PUBLISHER: [f"arn:{Aws.PARTITION}:events:{where}:rule/{name}-*" for name in stack_names],
        }
        for service, arns in sources.items():
            self.topic.add_to_resource_policy(iam.PolicyStatement(
                principals=[iam.ServicePrincipal(service)], actions=["sns:Publish"], resources=[self.topic.topic_arn],
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}, "ArnLike": {"aws:SourceArn": arns}},
            ))


def alarm_to(topic: sns.ITopic, *alarms: cw.Alarm, ok: bool = False) -> None:
    """Mail ``alarms`` when they fire; with ``ok``, also when they clear (a state that persists, such as a failed node)."""
    action = cw_actions.SnsAction(topic)
    for alarm in alarms:
        alarm.add_alarm_action(action)
        if ok:
            alarm.add_ok_action(action)


def notify(
    scope: Construct, construct_id: str, *, topic: sns.ITopic, pattern: events.EventPattern,
    message: events.RuleTargetInput, description: str,
) -> events.Rule:
    """An EventBridge rule sending ``message`` to ``topic`` for every event matching ``pattern``."""
    # By ARN: given the topic object, the SNS target adds a statement letting EventBridge publish from any rule
    # of any account; AlarmTopic's policy admits this deployment's rules only.
    by_arn = sns.Topic.from_topic_arn(scope, f"{construct_id}Topic", topic.topic_arn)
    rule = events.Rule(scope, construct_id, description=description, event_pattern=pattern,
                       targets=[targets.SnsTopic(by_arn, message=message)])
    # The imported topic's account and region are tokens (its ARN is the network stack's export), so CDK cannot
    # tell whether the target is in another environment; it is not: one app, one account and region.
    Annotations.of(rule).acknowledge_warning(
        "@aws-cdk/aws-events:ruleUnresolvedEnvironment",
        "The topic is this deployment's own, in the rule's account and region (an export of its network stack).",
    )
    return rule


class KarpenterInterruptions(Construct):
    """An alarm on the work that node removals interrupt, from the cluster's audit log: Karpenter draining training
    pods off a node it removes (drift, consolidation, an interruption, node repair), and the node health checker
    deleting a node that failed its check (Karpenter replaces it).

    :param audit_log: the cluster's control-plane log group (with the audit log type on).
    :param cluster_name: the cluster's name (in the metric's name: a metric filter adds no fixed dimensions).
    :param username: Karpenter's Kubernetes user, ``system:serviceaccount:<namespace>:<service account>``.
    :param training_namespace: where training pods run.
    :param health_checker: the node health checker's Kubernetes user. Default: none.
    :param topic: where the alarm mails.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, audit_log: logs.ILogGroup, cluster_name: str, username: str,
        training_namespace: str, topic: sns.ITopic, health_checker: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.metric_name = f"InterruptedTrainingPods-{cluster_name}"
        self.filter = logs.MetricFilter(
            self, "Filter", log_group=audit_log,
            filter_pattern=interruptions(username, training_namespace, health_checker),
            metric_namespace=KARPENTER_METRIC_NAMESPACE, metric_name=self.metric_name, metric_value="1",
        )
        self.alarm = cw.Alarm(
            self, "Alarm",
            alarm_description=f"{cluster_name}: in the last 5 minutes Karpenter drained running training pods off nodes "
            "it removed (drift, consolidation of an underused node, an interruption: Spot, rebalance, EC2 scheduled "
            "change, capacity block end; or node repair), or the node health checker had a node replaced. Empty "
            "nodes removed after a job are not counted. Why: kubectl get events -A --field-selector "
            "source=karpenter, the karpenter pods' logs (kubectl logs -n kube-system -l "
            "app.kubernetes.io/name=karpenter), and the health checker's (docs/guide/health.md, Node health).",
            metric=self.filter.metric(statistic="Sum", period=KARPENTER_PERIOD),
            threshold=0, comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1, treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        alarm_to(topic, self.alarm)


def interruptions(username: str, training_namespace: str, health_checker: str | None = None) -> logs.IFilterPattern:
    """Audit events (audit.k8s.io/v1 Events, which EKS writes as JSON) of ``username`` evicting a training pod
    (verb create on the pods/eviction subresource) or deleting one, and of ``health_checker`` deleting a node. The
    field names are the audit API's own (kubernetes/apiserver pkg/apis/audit/v1 types.go: Event.verb, .user.username,
    .objectRef.resource, .namespace, .subresource); the calls are Karpenter's (kubernetes-sigs/karpenter
    pkg/controllers/node/termination/terminator/eviction.go: SubResource("eviction").Create, and Delete of a pod past
    the node's termination deadline)."""
    text = logs.FilterPattern.string_value
    drained = logs.FilterPattern.all(
        text("$.user.username", "=", username),
        text("$.objectRef.resource", "=", "pods"),
        text("$.objectRef.namespace", "=", training_namespace),
        logs.FilterPattern.any(
            logs.FilterPattern.all(text("$.verb", "=", "create"), text("$.objectRef.subresource", "=", "eviction")),
            text("$.verb", "=", "delete"),
        ),
    )
    if health_checker is None:
        return drained
    replaced = logs.FilterPattern.all(
        text("$.user.username", "=", health_checker), text("$.verb", "=", "delete"),
        text("$.objectRef.resource", "=", "nodes"),
    )
    return logs.FilterPattern.any(drained, replaced)
