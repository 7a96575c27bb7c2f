"""trainium-cdk node health check: before a Trainium node takes work, check it against the catalog of its type.

    python3 health_check.py --devices N --cores N[,N] --efa N [--driver VERSION | --min-driver VERSION] [--fsx PATH]
                            [--collective [--collective-timeout SECONDS]] [--kube [--probe FILE]]

Checks (one line on stderr per failed check, exit 1; exit 0 when all pass):
  devices  Neuron devices: ``neuron-ls --json-output`` where the Neuron tools are installed, else /dev/neuron<N>.
  cores    NeuronCores: the devices' ``nc_count`` (neuron-ls) or ``core_count`` (the driver's sysfs,
           /sys/devices/virtual/neuron_device/neuron<N>/core_count); any of the listed counts passes: Trainium2
           shows 128 physical or 64 logical NeuronCores (LNC=2), depending on the tool and setting.
  efa      EFA interfaces: the RDMA devices the efa kernel module registers, /sys/class/infiniband/*.
  driver   the loaded Neuron driver (/sys/module/neuron/version) is VERSION (hosts whose setup installs it), or with
           --min-driver is VERSION or newer (EKS, whose AMI release brings its own driver: a Neuron runtime needs a
           driver at least as new as its release's; Neuron runtime FAQ, "This runtime requires Neuron Driver
           version X or greater").
  fsx      PATH is a Lustre mount (/proc/1/mounts: the host's, also from a container that mounts /proc).
  collective  (--collective) a short on-node collective over all NeuronCores: nccom-test's bf16 all-reduce at
           COLLECTIVE_SIZES, the fabric check's tool and table on one node (trainium_cdk/runtime/fabric.py); it fails when
           nccom-test fails, reports no bus bandwidth or has not finished after --collective-timeout seconds
           (COLLECTIVE_TIMEOUT_S): a hung collective is the failure it is there to find. nccom-test needs the
           Neuron runtime and collectives libraries beside the tools: where it is not installed the check is not
           run, and says so. What it measured, and how long it took, is printed on stdout.
The host's files are read under TRN_HEALTH_ROOT (default /): a pod mounts them under /host; stand-ins anywhere.

--kube (the EKS checker DaemonSet, in a pod on the node NODE_NAME, with its service account): on pass, take this
node's startup taint (TAINT_KEY) off; on failure, leave it, record the failed checks as the node condition
TrainiumHealthy=False and, on a Karpenter node, delete the Node so that Karpenter terminates the instance and
launches another (Karpenter docs, "Disruption": deleting a node is a manual way to deprovision it; its
termination finalizer drains it and deletes its NodeClaim). Then wait: a DaemonSet pod that exits is restarted,
and the check must not run again on a node already untainted.

Why a condition of our own and no node repair: EKS node repair (managed node groups) and Karpenter's (its AWS
provider's RepairPolicies: Ready, AcceleratedHardwareReady, StorageReady, NetworkingReady, KernelReady,
ContainerRuntimeReady) act only on conditions that others own. The kubelet rewrites Ready on every status update,
and the node monitoring agent rewrites its five with its own status at least every 5 minutes, sooner than any repair
waits (10 or 30 minutes: aws/eks-node-monitoring-agent pkg/manager/node_exporter.go, reportManagedConditions: "If a
managed condition already exists, it will be replaced by our local copy"). So a Karpenter node is deleted, and a
managed node group's node stays tainted, and the checker prints the command that has its Auto Scaling group replace
it (an instance set Unhealthy is terminated and replaced: EC2 Auto Scaling User Guide, "Set up a custom health
check"); the checker holds no AWS credentials to make that call itself.
A failed driver check alone replaces nothing: the AMI release brings the driver, so every replacement would fail
the same way.

--probe FILE (with --kube): once the node's own checks pass, run the on-node collective in the probe pod FILE
describes (kube_probe.py: the checker's pod holds no Neuron device and has no Neuron runtime); a failed collective
fails the node like any other check, before the taint comes off.
"""

import glob
import importlib
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

PREFIX = "trainium-cdk health:"
NEURON_BIN = "/opt/aws/neuron/bin"  # where aws-neuronx-tools installs neuron-ls (on PATH only in login shells)
CONDITION = "TrainiumHealthy"
KARPENTER_NODEPOOL_LABEL = "karpenter.sh/nodepool"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def host(path):
    return os.path.join(os.environ.get("TRN_HEALTH_ROOT", "/"), path.lstrip("/"))


def neuron_devices():
    """(devices, cores) from neuron-ls, or from /dev and the driver's sysfs where the tools are not installed."""
    tool = shutil.which("neuron-ls", path=os.pathsep.join([os.environ.get("PATH", ""), NEURON_BIN]))
    if tool is not None:
        try:
            listing = json.loads(subprocess.run([tool, "--json-output"], capture_output=True, text=True, check=True,
                                                timeout=60).stdout)
            return len(listing), sum(int(device.get("nc_count", 0)) for device in listing)
        except (OSError, ValueError, subprocess.SubprocessError):
            return 0, 0
    devices = [p for p in glob.glob(host("/dev/neuron*")) if re.fullmatch(r"neuron[0-9]+", os.path.basename(p))]
    cores = 0
    for path in glob.glob(host("/sys/devices/virtual/neuron_device/neuron*/core_count")):
        try:
            cores += int(read(path))
        except ValueError:
            pass
    return len(devices), cores


def read(path):
    try:
        with open(path) as file:
            return file.read().strip()
    except OSError:
        return ""


def mounted(path):
    """The file system type mounted at ``path`` (the host's mount table), or None."""
    for line in read(host("/proc/1/mounts")).splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[1] == path:
            return fields[2]
    return None


# One size, bandwidth-bound but quick: 32 MiB, nccom-test's default size, 2 warm-up and 5 measured operations.
COLLECTIVE_SIZES = ["-b", "32MB", "-e", "32MB", "-n", "5", "-w", "2"]
# How long the collective may take before the node fails it. What it should take: the 7 operations themselves about
# 20 ms (the Neuron nccom-test guide's tables: 32 MiB all-reduce in 768 us over 2 NeuronCores of a trn1, 2711 us
# over 64 ranks on 2 trn1 instances); the rest is nccom-test's own start, which generates the NEFFs of the operation
# and loads the Neuron runtime on every rank (the guide: "nccom-test will generate, and then execute, NEFFs"), and
# for which Neuron publishes no time. Not measured here (no Trainium host in the session that wrote this): the check
# prints its duration (the number to set this from once a real node has run it); 300 s leaves a start of a minute
# room several times over and still ends a hang in five minutes, not at the setup's own timeout.
COLLECTIVE_TIMEOUT_S = 300
# A row of nccom-test's table: size(B) count(elems) type time(us) algbw(GB/s) busbw(GB/s) (Neuron nccom-test guide).
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s*$")


def collective(cores, timeout=COLLECTIVE_TIMEOUT_S):
    """(failure or None, what was measured): nccom-test's bf16 all-reduce over ``cores`` ranks on this node, given
    ``timeout`` seconds."""
    tool = shutil.which("nccom-test", path=os.pathsep.join([os.environ.get("PATH", ""), NEURON_BIN]))
    if tool is None:
        return None, "collective: not run (no nccom-test on this host)"
    started = time.monotonic()
    try:
        # A session of its own: at the timeout the whole group goes (nccom-test starts a worker per rank, and a worker
        # left holding the output pipes would keep the wait for their end, and the node's setup, hanging).
        run = subprocess.Popen([tool, "-r", str(cores), "-N", "1", *COLLECTIVE_SIZES, "-d", "bf16", "allr"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError as error:
        return f"collective: nccom-test did not run: {error}", ""
    try:
        stdout, stderr = run.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        run.communicate()
        return f"collective: nccom-test all-reduce over {cores} NeuronCores did not finish within {timeout:g} s", ""
    took = time.monotonic() - started
    rows = [m for line in stdout.splitlines() if (m := ROW.match(line))]
    if run.returncode != 0 or not rows or any(float(m.group(6)) <= 0 for m in rows):
        last = (stdout.strip().splitlines() or stderr.strip().splitlines() or ["no output"])[-1]
        return f"collective: nccom-test all-reduce over {cores} NeuronCores failed (exit {run.returncode}): {last}", ""
    best = max(float(m.group(6)) for m in rows)
    return None, f"collective: bf16 all-reduce over {cores} NeuronCores, bus bandwidth {best:.2f} GB/s in {took:.1f} s"


def check(args, measured=None):
    """The failed checks, one line each (``measured``: where the lines of what was measured go)."""
    failed = []
    devices, cores = neuron_devices()
    if devices != args.devices:
        failed.append(f"devices: found {devices} Neuron devices, expected {args.devices}")
    if cores not in args.cores:
        expected = " or ".join(map(str, args.cores))
        failed.append(f"cores: found {cores} NeuronCores, expected {expected}")
    efa = len(glob.glob(host("/sys/class/infiniband/*")))
    if efa != args.efa:
        failed.append(f"efa: found {efa} EFA interfaces, expected {args.efa}")
    if args.driver or args.min_driver:
        loaded = read(host("/sys/module/neuron/version")) or "none"
        if args.driver and loaded != args.driver:
            failed.append(f"driver: Neuron driver {loaded} loaded, expected {args.driver}")
        if args.min_driver and version(loaded) < version(args.min_driver):
            failed.append(f"driver: Neuron driver {loaded} loaded, expected {args.min_driver} or newer")
    if args.fsx:
        kind = mounted(args.fsx)
        if kind != "lustre":
            failed.append(f"fsx: {args.fsx} is {'not mounted' if kind is None else 'a ' + kind + ' mount, not Lustre'}")
    if args.collective and not failed:  # on a node whose devices and driver passed
        # The fewest NeuronCores the catalog lists: Trainium2's logical count, nccom-test's ranks at its default LNC=2.
        failure, note = collective(min(args.cores), args.collective_timeout)
        failed += [failure] if failure else []
        if measured is not None and note:
            measured.append(note)
    return failed


def version(text):
    """``2.27.4.0`` (or ``2.29.0.0-dkms``) as numbers to compare; no version at all compares below every version."""
    numbers = re.match(r"[0-9]+(?:\.[0-9]+)*", text)
    return tuple(int(n) for n in numbers.group(0).split(".")) if numbers else ()


class Kube:
    """The Kubernetes API from inside a pod: its service account's token and CA (KUBERNETES_SERVICE_HOST/PORT)."""

    def __init__(self):
        account = os.environ.get("TRN_HEALTH_SERVICE_ACCOUNT_DIR", SERVICE_ACCOUNT_DIR)  # another only under stand-ins
        self.token = read(os.path.join(account, "token"))
        self.context = ssl.create_default_context(cafile=os.path.join(account, "ca.crt"))
        self.base = f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}"

    def call(self, method, path, body=None, content_type="application/json", raw=False):
        """The response as JSON, or with ``raw`` as text (a pod's log)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Accept": "*/*" if raw else "application/json",
            "Content-Type": content_type})
        with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
            text = response.read()
            return text.decode(errors="replace") if raw else json.loads(text or b"{}")

    @property
    def namespace(self):
        account = os.environ.get("TRN_HEALTH_SERVICE_ACCOUNT_DIR", SERVICE_ACCOUNT_DIR)
        return read(os.path.join(account, "namespace"))


def untaint(kube, node, key):
    """Take ``key`` off the node's taints; the test of resourceVersion makes a concurrent change (the kubelet, the
    device plugins) a conflict to retry rather than a lost update."""
    for attempt in range(10):
        current = kube.call("GET", f"/api/v1/nodes/{node}")
        taints = current.get("spec", {}).get("taints") or []
        kept = [t for t in taints if t.get("key") != key]
        if len(kept) == len(taints):
            return
        try:
            kube.call("PATCH", f"/api/v1/nodes/{node}", [
                {"op": "test", "path": "/metadata/resourceVersion", "value": current["metadata"]["resourceVersion"]},
                {"op": "replace", "path": "/spec/taints", "value": kept},
            ], content_type="application/json-patch+json")
            return
        except urllib.error.HTTPError as error:
            if error.code not in (409, 422) or attempt == 9:
                raise
            time.sleep(1)


def mark_failed(kube, node, failed):
    """The failed checks as the node's TrainiumHealthy condition; then a Karpenter node is deleted (replaced), unless
    only the driver failed (the AMI's: a replacement would fail the same way) or the probe pod could not run (its
    image, the API: the same on any node). What happened, in a line."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    kube.call("PATCH", f"/api/v1/nodes/{node}/status", {"status": {"conditions": [{
        "type": CONDITION, "status": "False", "reason": "HealthCheckFailed", "message": "; ".join(failed),
        "lastHeartbeatTime": now, "lastTransitionTime": now,
    }]}}, content_type="application/strategic-merge-patch+json")
    if all(line.startswith("driver:") for line in failed):
        return ("left tainted: its AMI release brings this driver, so a replacement would fail the same way: "
                "move the Neuron track's EKS AMI release (docs/guide/health.md, Node health)")
    if all(line.startswith(("driver:", "probe:")) for line in failed):
        return "left tainted: the probe pod could not run here, nor would it on a replacement (docs/guide/health.md)"
    current = kube.call("GET", f"/api/v1/nodes/{node}")
    if KARPENTER_NODEPOOL_LABEL in (current.get("metadata", {}).get("labels") or {}):
        kube.call("DELETE", f"/api/v1/nodes/{node}")
        return "deleted: Karpenter replaces it"
    # providerID aws:///<zone>/<instance id> (the AWS cloud provider's form).
    instance = current.get("spec", {}).get("providerID", "").rsplit("/", 1)[-1] or "<instance id>"
    # Without --no-should-respect-grace-period the call is ignored inside the group's health check grace period,
    # which a node that has just joined may still be in (EC2 Auto Scaling API Reference, SetInstanceHealth).
    return (f"left tainted: have its node group replace it: aws autoscaling set-instance-health --instance-id "
            f"{instance} --health-status Unhealthy --no-should-respect-grace-period")


def parse(argv):
    import argparse

    parser = argparse.ArgumentParser(prog="health_check.py")
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--cores", type=lambda text: [int(n) for n in text.split(",")], required=True)
    parser.add_argument("--efa", type=int, required=True)
    parser.add_argument("--driver", default="")
    parser.add_argument("--min-driver", default="")
    parser.add_argument("--fsx", default="")
    parser.add_argument("--collective", action="store_true")
    parser.add_argument("--collective-timeout", type=float, default=COLLECTIVE_TIMEOUT_S)
    parser.add_argument("--kube", action="store_true")
    parser.add_argument("--probe", default="")
    return parser.parse_args(argv)


def main(argv):
    args = parse(argv)
    if args.kube and not tainted(Kube(), os.environ["NODE_NAME"], os.environ["TAINT_KEY"]):
        # Checked before (the pod was replaced: a DaemonSet update, a restart): the node may be running a job now.
        print(f"{PREFIX} node {os.environ['NODE_NAME']} was checked before: nothing to do", flush=True)
        return wait()
    measured = []
    failed = check(args, measured)
    if args.kube and args.probe and not failed:
        # kube_probe.py: the file beside this one (the ConfigMap carries both), or this package's module.
        probe = importlib.import_module(f"{__package__}.kube_probe" if __package__ else "kube_probe")
        kube = Kube()
        failed += probe.run(kube, os.environ["NODE_NAME"], args.probe, kube.namespace, measured)
    for line in measured:
        print(f"{PREFIX} {line}", flush=True)
    for line in failed:
        print(f"{PREFIX} FAIL {line}", file=sys.stderr, flush=True)
    if not failed:
        print(f"{PREFIX} PASS ({args.devices} Neuron devices, {args.efa} EFA interfaces)", flush=True)
    if args.kube:
        node, key = os.environ["NODE_NAME"], os.environ["TAINT_KEY"]
        kube = Kube()
        if failed:
            print(f"{PREFIX} node {node} {mark_failed(kube, node, failed)}", flush=True)
        else:
            untaint(kube, node, key)
            print(f"{PREFIX} node {node}: {key} removed", flush=True)
        wait()
    return 1 if failed else 0


def tainted(kube, node, key):
    taints = kube.call("GET", f"/api/v1/nodes/{node}").get("spec", {}).get("taints") or []
    return any(t.get("key") == key for t in taints)


def wait():
    """A DaemonSet pod that exits is restarted (and would check again): stay, doing nothing."""
    if os.environ.get("TRN_HEALTH_EXIT") != "1":  # stand-ins only
        signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
