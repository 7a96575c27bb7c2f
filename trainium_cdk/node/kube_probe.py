"""trainium-cdk node health on EKS: the on-node collective, in a probe pod that holds all of the node's Neuron devices.

Two sides, both shipped in the checker's ConfigMap beside health_check.py:

    python3 kube_probe.py --cores N [--timeout SECONDS]     (in the probe pod: the Neuron training image)

runs health_check.py's collective (nccom-test's bf16 all-reduce over N NeuronCores) and reports as the checker does:
``trainium-cdk health:`` lines, ``FAIL`` ones on stderr, exit 1 on failure. Unlike the host check, a missing
nccom-test fails: the image is the Neuron training image, which installs aws-neuronx-tools (nccom-test) and puts
/opt/aws/neuron/bin on PATH (aws-neuron/deep-learning-containers, docker/pytorch/training/<version>/Dockerfile.neuronx:
``apt-get install aws-neuronx-tools aws-neuronx-collectives aws-neuronx-runtime-lib``, ``ENV PATH=/opt/aws/neuron/bin``).

:func:`run` (in the checker, health_check.py --kube --probe FILE) starts that pod on its own node and reads its verdict:
  1. waits until the node advertises all its Neuron devices (status.allocatable, the device plugin's): a pod with
     spec.nodeName skips the scheduler, and its kubelet fails it at once when the node lacks what it requests
     (kubernetes/kubernetes test/e2e/framework/pod/node_selection.go: setting NodeName "will bypass the scheduler,
     potentially causing kubelet to Fail the pod immediately if it's out of resources");
  2. creates the pod of FILE (the chart's) with its name and spec.nodeName set;
  3. waits for it to end (its activeDeadlineSeconds, and a minute), reads its log, deletes it;
  4. returns the failed checks: the pod's FAIL lines, or why it gave none.
Failures a replacement node would repeat (the image cannot be pulled, the API refused the pod) start with
``probe:``, and replace nothing (health_check.mark_failed).
"""

import importlib
import json
import os
import sys
import time
import urllib.error

PREFIX = "trainium-cdk health:"
# The device plugin's DaemonSet pod starts on the node as it joins (it tolerates the health taint) and registers the
# devices within seconds of its start; 5 minutes covers its image pull on a new node.
ADVERTISE_TIMEOUT_S = 300
POLL_S = 2
# After the pod's activeDeadlineSeconds the kubelet fails it; a minute more for the kubelet to report that.
GRACE_S = 60
# A container waiting for these cannot start on any node of this image and registry (kubelet's image pull reasons).
IMAGE_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


def stand_in(name, default):
    """A timing a stand-in may shorten (TRN_HEALTH_<NAME>, tests only)."""
    return float(os.environ.get(f"TRN_HEALTH_{name}", default))


def run(kube, node, path, namespace, measured):
    """The on-node collective through a probe pod on ``node``: the failed checks (``measured`` gets what it measured)."""
    with open(path) as file:
        pod = json.load(file)
    name = f"{pod['metadata']['labels']['app.kubernetes.io/name']}-probe-{node}"[:253].rstrip("-.")
    pod["metadata"]["name"] = name
    pod["spec"]["nodeName"] = node
    resources = pod["spec"]["containers"][0]["resources"]["limits"]
    missing = advertised(kube, node, resources, stand_in("ADVERTISE_TIMEOUT", ADVERTISE_TIMEOUT_S))
    if missing:
        return [f"collective: the probe pod cannot start: the node does not advertise {missing} within "
                f"{stand_in('ADVERTISE_TIMEOUT', ADVERTISE_TIMEOUT_S):g} s (the Neuron device plugin has not "
                "registered the devices)"]
    pods = f"/api/v1/namespaces/{namespace}/pods"
    try:
        create(kube, pods, pod)
    except urllib.error.HTTPError as error:
        return [f"probe: the API refused the probe pod (HTTP {error.code}): {reason(error)}"]
    try:
        status = finish(kube, f"{pods}/{name}", pod["spec"]["activeDeadlineSeconds"] + GRACE_S)
        log = kube.call("GET", f"{pods}/{name}/log?container={pod['spec']['containers'][0]['name']}", raw=True)
    finally:
        delete(kube, f"{pods}/{name}")
    return verdict(status, log, pod["spec"]["containers"][0]["image"], measured)


def advertised(kube, node, resources, timeout):
    """None once the node's allocatable has every one of ``resources``; else what it lacks, after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        allocatable = (kube.call("GET", f"/api/v1/nodes/{node}").get("status") or {}).get("allocatable") or {}
        lacking = {k: v for k, v in resources.items() if int(allocatable.get(k, "0")) < int(v)}
        if not lacking:
            return None
        if time.monotonic() >= deadline:
            return ", ".join(f"{k}: {v} (it has {allocatable.get(k, '0')})" for k, v in lacking.items())
        time.sleep(stand_in("POLL", POLL_S))


def create(kube, pods, pod):
    """Create the probe. One left by a checker stopped mid-probe (a DaemonSet update) is deleted first, and the new
    one created once it is gone: a pod's deletion waits for its containers to stop (its grace period, 30 s)."""
    deadline = time.monotonic() + GRACE_S * 2
    while True:
        try:
            kube.call("POST", pods, pod)
            return
        except urllib.error.HTTPError as error:
            if error.code != 409 or time.monotonic() >= deadline:
                raise
        delete(kube, f"{pods}/{pod['metadata']['name']}")
        time.sleep(stand_in("POLL", POLL_S))


def delete(kube, path):
    """Delete the pod at ``path``; one already gone is no error."""
    try:
        kube.call("DELETE", path)
    except urllib.error.HTTPError as error:
        if error.code != 404:
            raise


def finish(kube, path, timeout):
    """The pod's status once it has ended (Succeeded or Failed), or its last status after ``timeout``."""
    deadline = time.monotonic() + stand_in("PROBE_WAIT", timeout)
    while True:
        status = kube.call("GET", path).get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed") or time.monotonic() >= deadline:
            return status
        time.sleep(stand_in("POLL", POLL_S))


def verdict(status, log, image, measured):
    """The failed checks the probe reported (its FAIL lines), or why it reported none."""
    lines = [line.removeprefix(PREFIX).strip() for line in log.splitlines() if line.startswith(PREFIX)]
    failed = [line.removeprefix("FAIL ") for line in lines if line.startswith("FAIL ")]
    phase = status.get("phase", "Unknown")
    if phase == "Succeeded" and not failed:
        measured += [line for line in lines if line.startswith("collective:")]
        return []
    if failed:
        return failed
    waiting = [s["state"]["waiting"] for s in status.get("containerStatuses") or [] if "waiting" in s.get("state", {})]
    if waiting and waiting[0].get("reason") in IMAGE_REASONS:
        return [f"probe: the probe pod's image {image} cannot be pulled: {waiting[0]['reason']}: "
                f"{waiting[0].get('message', '')}".rstrip(": ")]
    why = status.get("reason") or (waiting[0].get("reason") if waiting else "") or "no reason given"
    if phase in ("Succeeded", "Failed"):
        return [f"collective: the probe pod ended {phase} ({why}) with no verdict in its log"]
    return [f"collective: the probe pod did not finish in time (phase {phase}: {why})"]


def reason(error):
    try:
        return json.loads(error.read() or b"{}").get("message", error.reason)
    except ValueError:
        return str(error.reason)


def main(argv):
    import argparse

    parser = argparse.ArgumentParser(prog="kube_probe.py")
    parser.add_argument("--cores", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    health = importlib.import_module("health_check")  # the file beside this one, in the same ConfigMap
    failure, note = health.collective(args.cores, args.timeout)
    if note.endswith("(no nccom-test on this host)"):
        failure = "probe: no nccom-test in the probe pod's image (the Neuron training image installs aws-neuronx-tools)"
    if failure:
        print(f"{PREFIX} FAIL {failure}", file=sys.stderr, flush=True)
        return 1
    print(f"{PREFIX} {note}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
