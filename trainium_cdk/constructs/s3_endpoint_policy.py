"""The S3 gateway endpoint's policy: the buckets a request from the training VPC may reach through it.

Without a policy the endpoint lets any principal reach any bucket of any account in the region: a job could copy a
dataset or a checkpoint into a bucket of its own. With this one it reaches

- the buckets of the deploying account (``aws:ResourceAccount``): the CDK assets bucket the nodes fetch their
  scripts from, the storage stack's data bucket and ParallelCluster's cluster bucket, whose names CloudFormation and
  ParallelCluster pick at deploy (the network stack, deployed first, cannot name them);
- the buckets the config names in other accounts (a data repository's or the data loader's bucket,
  ``network.s3_buckets``);
- the AWS-owned buckets the nodes read, each from the AWS documentation that names it (:data:`AWS_OWNED_READS`),
  and the two CloudFormation buckets that custom resources and wait conditions in the VPC answer to.

The shape is the one of AWS's data perimeter examples (aws-samples/data-perimeter-policy-examples,
vpc_endpoint_policies/s3_endpoint_policy.json: "AllowRequestsToAWSOwnedResources"). It bounds the route through the
endpoint only: S3 in other regions is reached through NAT, which no endpoint policy sees.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Fn, Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

# AWS-owned buckets that nodes read through the endpoint ({region} is the stack's), each with where AWS names it.
AWS_OWNED_READS: tuple[tuple[str, str], ...] = (
    # Every ECR image layer (EKS add-ons, the Neuron DLCs, the CDK asset images): ECR user guide, "Amazon ECR interface
    # VPC endpoints", "Minimum Amazon S3 bucket permissions for Amazon ECR".
    ("prod-{region}-starport-layer-bucket", "ECR image layers"),
    # dnf on Amazon Linux 2023 (EKS, Batch and access-host nodes): AL2023 user guide, "Kernel Live Patching" and the
    # repository configuration (/etc/yum.repos.d/amazonlinux.repo, mirrors in al2023-repos-<region>-de612dc2).
    ("al2023-repos-{region}-de612dc2", "Amazon Linux 2023 package repositories"),
    ("al2023-{region}", "Amazon Linux 2023 kernel live patches"),
    # The SSM agent (every node: Session Manager, Run Command): Systems Manager user guide, "SSM Agent communications
    # with AWS managed S3 buckets".
    ("aws-ssm-{region}", "SSM Agent documents and plugins"),
    ("amazon-ssm-{region}", "SSM Agent updates"),
    ("amazon-ssm-packages-{region}", "SSM Agent packages"),
    ("{region}-birdwatcher-prod", "SSM Distributor"),
    ("aws-ssm-distributor-file-{region}", "SSM Distributor files"),
    ("aws-ssm-document-attachments-{region}", "SSM document attachments"),
    ("patch-baseline-snapshot-{region}", "SSM Patch Manager baselines"),
    # ParallelCluster's own bucket (cookbooks, dependencies at node bootstrap): ParallelCluster user guide, "Amazon S3
    # buckets used by AWS ParallelCluster" (<region>-aws-parallelcluster).
    ("{region}-aws-parallelcluster", "ParallelCluster resources"),
    # The ECS container agent's releases (Batch nodes; ecs-init fetches an agent it lacks): Amazon ECS developer guide,
    # "Updating the Amazon ECS container agent" (s3.<region>.amazonaws.com/amazon-ecs-agent-<region>/).
    ("amazon-ecs-agent-{region}", "ECS container agent"),
    # registry.k8s.io (kube-scheduler for the Neuron scheduler extension, Cluster Autoscaler) redirects clients in AWS
    # to its regional bucket (kubernetes/k8s.io, infra/aws/terraform/registry.k8s.io/s3/bucket.tf). The project
    # warns that this may change: an image it cannot pull names the redirect in the kubelet's events.
    ("prod-registry-k8s-io-{region}", "registry.k8s.io image layers"),
)
# The FSx Lustre client repository and its key (Ubuntu nodes; FSx for Lustre user guide, "Installing the Lustre
# client"): global-endpoint buckets of us-east-1, so they pass the endpoint only there.
LUSTRE_CLIENT_BUCKETS = ("fsx-lustre-client-repo", "fsx-lustre-client-repo-public-keys")
# CloudFormation's buckets: responses of custom resources run in the VPC (CDK's kubectl provider with a private
# endpoint) and wait-condition signals (ParallelCluster's head node), both presigned PUTs. CloudFormation user guide,
# "Setting up VPC endpoints for AWS CloudFormation" (cloudformation-custom-resource-response-<region without dashes>,
# cloudformation-waitcondition-<region>).
CFN_RESPONSE_BUCKET = "cloudformation-custom-resource-response-{region_no_dashes}"
CFN_WAIT_CONDITION_BUCKET = "cloudformation-waitcondition-{region}"


def restrict_s3_endpoint(scope: Construct, endpoint: ec2.GatewayVpcEndpoint, *, buckets: Sequence[str] = ()) -> None:
    """Replace the endpoint's allow-all policy with the perimeter above; ``buckets`` are the named buckets of other
    accounts (read and write, as their own policies and the caller's allow)."""
    stack = Stack.of(scope)
    region = stack.region
    region_no_dashes = Fn.join("", Fn.split("-", region)) if Token.is_unresolved(region) else region.replace("-", "")

    def objects(bucket: str) -> str:
        return f"arn:{stack.partition}:s3:::{bucket}/*"

    anyone = [iam.AnyPrincipal()]
    endpoint.add_to_policy(iam.PolicyStatement(
        sid="ThisAccountsBuckets", principals=anyone, actions=["s3:*"], resources=["*"],
        conditions={"StringEquals": {"aws:ResourceAccount": stack.account}},
    ))
    named = sorted(set(buckets))
    if named:
        endpoint.add_to_policy(iam.PolicyStatement(
            sid="ConfiguredBuckets", principals=anyone, actions=["s3:*"],
            resources=[arn for b in named for arn in (f"arn:{stack.partition}:s3:::{b}", objects(b))],
        ))
    owned = [objects(name.format(region=region)) for name, _ in AWS_OWNED_READS]
    endpoint.add_to_policy(iam.PolicyStatement(
        sid="AwsOwnedBuckets", principals=anyone, actions=["s3:GetObject"],
        resources=[*owned, *(objects(b) for b in LUSTRE_CLIENT_BUCKETS)],
    ))
    endpoint.add_to_policy(iam.PolicyStatement(
        sid="CloudFormationResponses", principals=anyone, actions=["s3:PutObject"],
        resources=[
            objects(CFN_RESPONSE_BUCKET.format(region_no_dashes=region_no_dashes)),
            objects(CFN_WAIT_CONDITION_BUCKET.format(region=region)),
        ],
    ))
