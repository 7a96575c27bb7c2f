"""`kubectl` for the README walkthroughs: the subcommands the README types, over the real Kubernetes client.

It reads the kubeconfig the walkthrough wrote (``aws eks update-kubeconfig`` or ``trn connect``) and talks
to the API server stand-in (tests/support/fake_kube.py) over HTTPS, as kubectl would. ``apply`` first validates
every object against the Kubernetes schemas (kubernetes-validate, strict; objects of CRDs, such as
Volcano jobs, are checked by their own tests) and refuses the input as kubectl does when one is invalid.
Only what the README uses is here: apply -f, get, describe node, logs [-f] (job/NAME or -l), delete,
config set-context --current --namespace. Anything else exits 2 naming the subcommand, so a README line
that needs more fails visibly.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

# kubectl's short names -> (apiVersion, kind).
KINDS = {
    "job": ("batch/v1", "Job"), "jobs": ("batch/v1", "Job"),
    "vcjob": ("batch.volcano.sh/v1alpha1", "Job"), "vcjobs": ("batch.volcano.sh/v1alpha1", "Job"),
    "pod": ("v1", "Pod"), "pods": ("v1", "Pod"), "po": ("v1", "Pod"),
    "node": ("v1", "Node"), "nodes": ("v1", "Node"), "no": ("v1", "Node"),
    "svc": ("v1", "Service"), "service": ("v1", "Service"), "pvc": ("v1", "PersistentVolumeClaim"),
    "deployment": ("apps/v1", "Deployment"), "deploy": ("apps/v1", "Deployment"),
}
CRD_GROUPS = ("volcano.sh", "karpenter.sh", "karpenter.k8s.aws")
LOG_WAIT_S = 600


def _kubeconfig() -> str:
    return os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")


def _clients() -> tuple[Any, Any, str]:
    from kubernetes import client, config, dynamic

    config.load_kube_config(config_file=_kubeconfig())
    _, active = config.list_kube_config_contexts(config_file=_kubeconfig())
    namespace = (active.get("context") or {}).get("namespace") or "default"
    api = client.ApiClient()
    return dynamic.DynamicClient(api), client.CoreV1Api(api), namespace


def _validate(obj: dict[str, Any]) -> None:
    import kubernetes_validate

    from tests.support.chart_helpers import K8S_VERSION

    if any(obj.get("apiVersion", "").split("/")[0].endswith(g) for g in CRD_GROUPS):
        return
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def apply(path: str) -> int:
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    objects = [o for o in yaml.safe_load_all(text) if o]
    for obj in objects:
        try:
            _validate(obj)
        except Exception as error:  # noqa: BLE001 - kubectl refuses the whole input on a schema error
            print(f"error: error validating data: {error}", file=sys.stderr)
            return 1
    dyn, _, default_ns = _clients()
    for obj in objects:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj["metadata"].get("namespace") or default_ns
        if resource.namespaced:
            dyn.create(resource, body=obj, namespace=namespace)
        else:
            dyn.create(resource, body=obj)
        group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
        print(f"{obj['kind'].lower()}{'.' + group if group else ''}/{obj['metadata']['name']} created")
    return 0


def _resource(dyn: Any, kind: str) -> Any:
    if kind not in KINDS:
        raise SystemExit(f"kubectl stand-in: resource type {kind!r} is not one the README uses")
    api_version, name = KINDS[kind]
    return dyn.resources.get(api_version=api_version, kind=name)


def _phase(obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    if "phase" in status:
        return str(status["phase"])
    if "state" in status:
        return str(status["state"].get("phase", ""))
    for condition in status.get("conditions") or []:
        if condition.get("status") == "True":
            return str(condition.get("type"))
    return "Running" if status else "Pending"


def get(args: list[str]) -> int:
    dyn, _, namespace = _clients()
    kind, names, labels = args[0], [], []
    rest = iter(args[1:])
    for arg in rest:
        if arg in ("-L", "--label-columns"):
            labels += next(rest).split(",")
        elif arg.startswith(("-L=", "--label-columns=")):
            labels += arg.split("=", 1)[1].split(",")
        elif arg.startswith("-"):
            raise SystemExit(f"kubectl stand-in: get {arg} is not an option the README uses")
        else:
            names.append(arg)
    resource = _resource(dyn, kind)
    listed = dyn.get(resource, namespace=namespace if resource.namespaced else None).to_dict()["items"]
    rows = [o for o in listed if not names or o["metadata"]["name"] in names]
    if names and not rows:
        print(f'Error from server (NotFound): {kind} "{names[0]}" not found', file=sys.stderr)
        return 1
    print("\t".join(["NAME", "STATUS", *(label.upper() for label in labels)]))
    for obj in rows:
        values = [(obj["metadata"].get("labels") or {}).get(label, "") for label in labels]
        print("\t".join([obj["metadata"]["name"], _phase(obj), *values]))
    return 0


def describe(args: list[str]) -> int:
    dyn, _, namespace = _clients()
    resource = _resource(dyn, args[0])
    obj = dyn.get(resource, name=args[1], namespace=namespace if resource.namespaced else None).to_dict()
    print(yaml.safe_dump(obj, sort_keys=False))
    return 0


def logs(args: list[str]) -> int:
    dyn, core, namespace = _clients()
    follow = "-f" in args or "--follow" in args
    selector = next((args[i + 1] for i, a in enumerate(args) if a in ("-l", "--selector")), None)
    target = next((a for a in args if a.startswith("job/")), None)
    if target:
        selector = f"job-name={target.split('/', 1)[1]}"
    if selector is None:
        raise SystemExit("kubectl stand-in: logs needs job/NAME or -l SELECTOR")
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        if pods and (not follow or all(p.status.phase in ("Succeeded", "Failed") for p in pods)):
            break
        if time.monotonic() > deadline or (not pods and not follow):
            print(f"error: no pod matches {selector} in {namespace}", file=sys.stderr)
            return 1
        time.sleep(0.5)
    # kubectl logs -l prints every matching pod; job/NAME the job's first pod.
    for pod in pods if not target else pods[:1]:
        print(core.read_namespaced_pod_log(pod.metadata.name, namespace), end="")
    return 0


def delete(args: list[str]) -> int:
    dyn, _, namespace = _clients()
    resource = _resource(dyn, args[0])
    dyn.delete(resource, name=args[1], namespace=namespace if resource.namespaced else None)
    print(f"{args[0]}.{resource.group or 'core'} \"{args[1]}\" deleted")
    return 0


def set_context(args: list[str]) -> int:
    if args[:2] != ["set-context", "--current"] or "--namespace" not in args[2] and "--namespace" not in args:
        raise SystemExit(f"kubectl stand-in: config {' '.join(args)} is not one the README uses")
    namespace = args[-1] if "--namespace" in args else args[2].split("=", 1)[1]
    path = Path(_kubeconfig())
    config = yaml.safe_load(path.read_text())
    for context in config["contexts"]:
        if context["name"] == config["current-context"]:
            context["context"]["namespace"] = namespace
    path.write_text(yaml.safe_dump(config))
    print(f'Context "{config["current-context"]}" modified.')
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        raise SystemExit("kubectl stand-in: no subcommand")
    verb, rest = argv[0], argv[1:]
    if verb == "apply" and rest[:1] == ["-f"]:
        return apply(rest[1])
    handlers = {"get": get, "describe": describe, "logs": logs, "delete": delete}
    if verb in handlers:
        return handlers[verb](rest)
    if verb == "config":
        return set_context(rest)
    print(f"kubectl stand-in: `kubectl {verb}` is not a subcommand the README uses", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
