#!/bin/bash
# trainium-cdk: the user data of an AWS Batch node and of the development instance. The setup (the Neuron driver
# and tools, EFA, the FSx client, metrics: constructs/batch_node.py; the instance's: constructs/dev_instance.py)
# ships once as an S3 asset (EC2 holds 16 KB of user data); this fetches it, checks its sha256 against the digest
# known at synth and only then runs it, with the values of the header above. A Batch host whose setup cannot be
# fetched, does not match or fails never joins the compute environment: the ECS agent is not started (the
# ECS-optimized AMI orders ecs.service after cloud-final.service, which runs this) and the instance shuts down,
# which the launch template's InstanceInitiatedShutdownBehavior makes a termination; Batch then launches another
# host and the job's retry lands there. The development instance (NODE_SETUP_STAYS=yes) stays up, reachable with
# Session Manager, the reason in /var/log/cloud-init-output.log.
#   NODE_SETUP_URL     s3://bucket/key of the setup program
#   NODE_SETUP_SHA256  its sha256 (hex)
#   NODE_SETUP_REGION  the bucket's region
#   NODE_SETUP_STAYS   yes: a failure leaves the host up (the development instance)
#   NODE_SETUP_PATH    where the program is written (another only under stand-ins)
set -uo pipefail
setup="${NODE_SETUP_PATH:-/var/lib/trainium-cdk/node-setup.sh}"

refuse() {
  if [ "${NODE_SETUP_STAYS:-}" = yes ]; then
    echo "trainium-cdk: $*: the instance is not set up; it stays up for Session Manager" >&2
    exit 1
  fi
  echo "trainium-cdk: $*: this host does not join the compute environment and terminates" >&2
  systemctl mask --now ecs.service || true
  shutdown -h now
  exit 1
}

# The ECS-optimized AL2023 AMI is built from the minimal AMI, which has no AWS CLI (aws/amazon-ecs-ami).
command -v aws >/dev/null 2>&1 || dnf install -y awscli-2 || refuse "cannot install the AWS CLI"
mkdir -p "$(dirname "$setup")" || refuse "cannot create $(dirname "$setup")"
fetched=''
for attempt in 1 2 3; do
  if aws s3 cp --only-show-errors --region "${NODE_SETUP_REGION:?}" "${NODE_SETUP_URL:?}" "$setup"; then
    fetched=yes
    break
  fi
  sleep $((attempt * 5))
done
[ -n "$fetched" ] || refuse "cannot fetch $NODE_SETUP_URL"
echo "${NODE_SETUP_SHA256:?}  $setup" | sha256sum --check --status || refuse "$NODE_SETUP_URL is not sha256 $NODE_SETUP_SHA256"
# A subshell, not a tested command: the setup's own `set -e` holds (bash ignores it in a `||` list), and it reads
# the header's values as the program it was (one text) read them.
# shellcheck source=/dev/null  # fetched at boot
( . "$setup" )
status=$?
[ "$status" -eq 0 ] || refuse "the node setup failed (exit $status)"
