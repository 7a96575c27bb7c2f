#!/bin/bash
# trainium-cdk: start pulling the deployment's training images on an EKS Trainium node at boot, from its user
# data, so that the training pod finds them (or most of their layers) on the node instead of pulling several GB
# after the node has joined, its device plugins have started and the pod was scheduled.
#   TRN_PREPULL_PARAMETER  the SSM parameter that lists the images, separated by spaces (the track's Neuron
#                          training image, which every image the project builds starts FROM, the project's own
#                          images and the images the config names); the stack writes it, the node role may read it.
#                          The images are read here, at boot, not written into the user data: a new image then
#                          changes the parameter, not the launch template, and rolls no node.
#   TRN_PREPULL_REGION     the parameter's region
#   TRN_CONTAINERD_CONFIG  containerd's config nodeadm wrote (/etc/containerd/config.toml; another only in tests)
#
# cloud-init runs user data scripts before nodeadm's run phase, which restarts containerd and then starts
# kubelet (amazon-eks-ami: nodeadm-run.service is After=cloud-final.service; nodeadm/internal/containerd
# daemon.go EnsureRunning restarts containerd): a pull started here would be cut by that restart, and a
# pull waited for here would hold back the node's join. So this script hands itself to systemd as a transient
# unit ordered after nodeadm-run.service and returns at once: the pull runs while the node registers.
set -euo pipefail

if [[ "${1:-}" != --pull ]]; then
  systemd-run --no-block --unit=trn-prepull-images --description="trainium-cdk: pre-pull training images" \
    --property=After=nodeadm-run.service --property=Wants=nodeadm-run.service \
    /bin/bash "$(readlink -f "$0")" --pull
  exit 0
fi

# Pull into the namespace and the snapshotter kubelet's pulls (the CRI plugin) use, so that the pod's pull
# finds the image unpacked: nodeadm sets the CRI snapshotter to soci with FastImagePull, else containerd's
# default overlayfs (nodeadm/internal/containerd/config2.template.toml).
snapshotter=overlayfs
if grep -Eq '^snapshotter *= *"soci"' "${TRN_CONTAINERD_CONFIG:-/etc/containerd/config.toml}"; then
  snapshotter=soci
fi
images="$(aws ssm get-parameter --region "${TRN_PREPULL_REGION:?the region}" \
  --name "${TRN_PREPULL_PARAMETER:?the parameter that lists the images}" --query Parameter.Value --output text)" || {
  # Not fatal: the pods' own pulls then do the work, as without a pre-pull.
  echo "trn-prepull-images: could not read $TRN_PREPULL_PARAMETER" >&2
  exit 1
}
status=0
for image in $images; do
  registry="${image%%/*}"
  # A private ECR registry takes a login (the node role's AmazonEC2ContainerRegistryReadOnly allows it); the
  # AMI's own build logs in the same way (templates/al2023/provisioners/install-nodeadm.sh). Public ECR
  # needs none.
  if [[ "$registry" =~ ^[0-9]{12}\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com ]]; then
    aws ecr get-login-password --region "${BASH_REMATCH[1]}" \
      | nerdctl login --username AWS --password-stdin "https://$registry" >/dev/null || true
  fi
  pulled=no
  for attempt in 1 2 3; do
    if nerdctl --namespace k8s.io pull --snapshotter "$snapshotter" --quiet "$image"; then
      pulled=yes
      break
    fi
    sleep $((attempt * 10))
  done
  if [[ "$pulled" == yes ]]; then
    echo "trn-prepull-images: pulled $image"
  else
    # Not fatal: the pod's own pull then does the work, as without a pre-pull.
    echo "trn-prepull-images: could not pull $image" >&2
    status=1
  fi
done
exit "$status"
