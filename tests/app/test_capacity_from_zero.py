"""Trainium capacity from zero on every backend, Karpenter's objects against its CRDs, Cluster
Autoscaler's node-group tags, Volcano without `enqueue`, and the bill of the default config.

Apps: the shared model variants (tests/support/apps.py: Karpenter in two, managed node groups in one) and the
default config with every backend, each synthesized once.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.support import paths
from tests.support.apps import VARIANTS, synthesized
from tests.support.helpers import helm_chart_name, imported, resources, synth
from tests.support.reachability import Reachability
from trainium_cdk.app.config import ConfigError, load_config
from trainium_cdk.app.cost import INTERFACE_ENDPOINT_COUNT, bill
from trainium_cdk.charts.karpenter import NodePoolProps, network_interfaces
from trainium_cdk.cli import main
from trainium_cdk.constructs.volcano import VOLCANO_SCHEDULER_CONFIG
from trainium_cdk.facts import prices, versions
from trainium_cdk.facts.capacity import GroupNodes, NodeCapacity
from trainium_cdk.facts.catalog import DEFAULT_CATALOG

CRDS = paths.DATA / "karpenter"
ALL_BACKENDS = "eks,batch,parallelcluster,instance"


@pytest.fixture(scope="module")
def default_app():
    """config/default.yaml, every backend."""
    return synth(load_config(None, {"backends": ALL_BACKENDS}), nag=False)


def _apps(default_app):
    return [("default", default_app)] + [(name, synthesized(name)) for name in sorted(VARIANTS)]


def _trainium_minimums(result) -> list[str]:
    """Every Trainium node set that keeps nodes while idle, on any backend."""
    config = result.config
    trainium = {t for t in config.catalog.names()}
    found = []
    for path in result.template_paths():
        template = json.loads(path.read_text())
        for logical_id, ng in resources(template, "AWS::EKS::Nodegroup").items():
            props = ng["Properties"]
            if props.get("Labels", {}).get("trainium-cdk/role") == "system":
                continue
            scaling = props["ScalingConfig"]
            if scaling.get("MinSize", 0) or scaling.get("DesiredSize", 0):
                found.append(f"{path.name}/{logical_id} {scaling}")
        for kind in ("AWS::AutoScaling::AutoScalingGroup",):
            for logical_id, asg in resources(template, kind).items():
                if asg["Properties"].get("MinSize") not in ("0", 0):
                    found.append(f"{path.name}/{logical_id}")
        for logical_id, ce in resources(template, "AWS::Batch::ComputeEnvironment").items():
            compute = ce["Properties"]["ComputeResources"]
            if compute.get("MinvCpus", 0) or compute.get("DesiredvCpus", 0):
                found.append(f"{path.name}/{logical_id} MinvCpus {compute.get('MinvCpus')}")
        for logical_id, cluster in resources(template, "Custom::PclusterCluster").items():
            for queue in cluster["Properties"]["ClusterConfiguration"]["Scheduling"]["SlurmQueues"]:
                for compute in queue["ComputeResources"]:
                    if compute.get("MinCount", 0):
                        found.append(f"{path.name}/{logical_id} {queue['Name']} MinCount {compute['MinCount']}")
        for logical_id, instance in resources(template, "AWS::EC2::Instance").items():
            # The development instance is one instance by design (`trn cost` prices it in the idle floor).
            if instance["Properties"]["InstanceType"] in trainium and "instance" not in config.backends:
                found.append(f"{path.name}/{logical_id}")
    model = Reachability.from_dir(result.outdir)
    for stack, objects in model.manifests():
        for o in objects:
            if o.get("kind") == "NodePool" and "replicas" in o["spec"]:
                found.append(f"{stack} NodePool {o['metadata']['name']} replicas {o['spec']['replicas']}")
    return found


def test_no_trainium_node_runs_until_a_job_asks_on_any_backend(default_app):
    backends = set()
    for name, result in _apps(default_app):
        backends |= set(result.config.backends)
        assert _trainium_minimums(result) == [], name
    assert backends == set(ALL_BACKENDS.split(","))


def test_default_eks_capacity_is_karpenter_with_no_trainium_node_group(default_app):
    assert default_app.config.eks.capacity == "karpenter"
    template = default_app.template_json("eks")
    nodegroups = resources(template, "AWS::EKS::Nodegroup").values()
    assert [n["Properties"]["Labels"] for n in nodegroups] == [{"trainium-cdk/role": "system"}]


# -- Karpenter ----------------------------------------------------------------------------------------

def _karpenter_objects(result) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for _, objects in Reachability.from_dir(result.outdir).manifests():
        for o in objects:
            if o.get("apiVersion", "").startswith(("karpenter.sh/", "karpenter.k8s.aws/")):
                found.setdefault(o["kind"], []).append(o)
    return found


def _schema(kind_file: str) -> dict:
    crd = yaml.safe_load((CRDS / kind_file).read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def _concrete(value):
    """CloudFormation expressions (ids known at deploy) as values of the shape the CRD expects."""
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref")):
            text = json.dumps(value)
            if "SecurityGroup" in text:
                return "sg-0123456789abcdef0"
            if "Subnet" in text:
                return "subnet-0123456789abcdef0"
            return "deploy-time-value"
        return {k: _concrete(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_concrete(v) for v in value]
    return value


@pytest.mark.parametrize("kind, crd", [("NodePool", "karpenter.sh_nodepools.yaml"),
                                        ("EC2NodeClass", "karpenter.k8s.aws_ec2nodeclasses.yaml")])
def test_karpenter_objects_validate_against_the_vendored_crds(default_app, kind, crd):
    schema = _schema(crd)
    objects = [o for name in ("default", *VARIANTS) if name == "default" or
               synthesized(name).config.eks.capacity == "karpenter"
               for o in _karpenter_objects(default_app if name == "default" else synthesized(name)).get(kind, [])]
    assert len(objects) >= 3
    for obj in objects:
        jsonschema.validate(_concrete(obj), schema)


def test_vendored_crds_are_the_pinned_karpenter_version():
    assert f"tag v{versions.KARPENTER_VERSION} " in (CRDS / "SOURCE.md").read_text()


def test_ec2_node_class_has_every_efa_interface_the_placement_group_and_a_locked_down_node(default_app):
    result = synthesized("trn2.48xlarge+trn2u.48xlarge")
    objects = _karpenter_objects(result)
    classes = {o["metadata"]["name"]: o["spec"] for o in objects["EC2NodeClass"]}
    for group in result.config.compute_groups:
        spec = classes[group.name]
        efa = [i for i in spec["networkInterfaces"] if i["interfaceType"] == "efa-only"]
        assert sorted(i["networkCardIndex"] for i in efa) == list(range(result.config.spec(group).efa_interfaces))
        assert {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"} in spec["networkInterfaces"]
        network = result.stacks.network
        placement = network.network.placement_group(group.name).node.default_child
        assert {k: imported(result, v) for k, v in spec["placementGroupSelector"].items()} == {
            "name": {"Fn::GetAtt": [network.resolve(network.get_logical_id(placement)), "GroupName"]}}
        assert spec["amiSelectorTerms"] == [{"alias": result.config.neuron_track.karpenter_ami_alias}]
        assert spec["metadataOptions"]["httpPutResponseHopLimit"] == 1
        assert spec["metadataOptions"]["httpTokens"] == "required"
        (root,) = spec["blockDeviceMappings"]
        assert root["ebs"]["encrypted"] is True and root["rootVolume"] is True
        assert len(spec["subnetSelectorTerms"]) == 1
        assert "capacityReservationSelectorTerms" not in spec


def test_node_pool_instance_type_taint_labels_limit_and_consolidation(default_app):
    (pool,) = _karpenter_objects(default_app)["NodePool"]
    group = default_app.config.compute_groups[0]
    template = pool["spec"]["template"]
    requirements = {r["key"]: r["values"] for r in template["spec"]["requirements"]}
    assert requirements["node.kubernetes.io/instance-type"] == [group.instance_type]
    assert requirements["karpenter.sh/capacity-type"] == ["on-demand"]
    assert template["spec"]["taints"] == [{"key": "aws.amazon.com/neuron", "value": "true", "effect": "NoSchedule"}]
    assert template["metadata"]["labels"]["trainium-cdk/compute-group"] == group.name
    assert pool["spec"]["limits"]["nodes"] == str(group.maximum)
    assert pool["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m"}


def test_reservations_and_capacity_blocks_select_the_reservation():
    base = dict(node_role="r", subnet_ids=["subnet-1"], security_group_ids=["sg-1"], ami_alias="al2023@v1")
    from trainium_cdk.charts.karpenter import ec2_node_class_spec, node_pool_spec

    for capacity, types in (("reservation", ["reserved", "on-demand"]), ("capacity-block", ["reserved"])):
        nodes = GroupNodes("g", DEFAULT_CATALOG.get("trn1.32xlarge"), max_nodes=2,
                           capacity=NodeCapacity(capacity, "cr-0aaaaaaaaaaaaaaaa"))
        props = NodePoolProps(nodes=nodes, **base)
        assert ec2_node_class_spec(props)["capacityReservationSelectorTerms"] == [{"id": "cr-0aaaaaaaaaaaaaaaa"}]
        requirements = {r["key"]: r["values"] for r in node_pool_spec(props)["template"]["spec"]["requirements"]}
        assert requirements["karpenter.sh/capacity-type"] == types
    with pytest.raises(ConfigError):
        NodeCapacity("reservation")
    assert network_interfaces(0) == []


def test_karpenter_controller_pod_identity_queue_and_rules(default_app):
    template = default_app.template_json("eks")
    charts = {helm_chart_name(c["Properties"]): c["Properties"] for c in resources(template, "Custom::AWSCDK-EKS-HelmChart").values()}
    karpenter = charts["karpenter"]
    assert "Version" not in karpenter and "Repository" not in karpenter  # the vendored chart (test_vendored_charts.py)
    # The values are JSON text joined with the queue's name (known at deploy).
    parts = karpenter["Values"]["Fn::Join"][1]
    (queue_name,) = [p for p in parts if not isinstance(p, str)]
    values = json.loads("".join(p if isinstance(p, str) else "<queue name>" for p in parts))
    assert values["nodeSelector"] == {"trainium-cdk/role": "system"}
    assert values["controller"]["image"]["tag"] == versions.KARPENTER_VERSION
    (queue_id,) = resources(template, "AWS::SQS::Queue")
    assert values["settings"]["interruptionQueue"] == "<queue name>"
    assert queue_name == {"Fn::GetAtt": [queue_id, "QueueName"]}
    associations = [a["Properties"] for a in resources(template, "AWS::EKS::PodIdentityAssociation").values()]
    assert {"karpenter", "fsx-csi-controller-sa"} <= {a["ServiceAccount"] for a in associations}
    rules = [r["Properties"] for r in resources(template, "AWS::Events::Rule").values()]
    assert {tuple(r["EventPattern"]["detail-type"]) for r in rules} == {
        ("AWS Health Event",), ("EC2 Spot Instance Interruption Warning",),
        ("EC2 Instance Rebalance Recommendation",), ("EC2 Instance State-change Notification",),
        ("EC2 Capacity Reservation Instance Interruption Warning",),
    }
    assert all([t["Arn"] for t in r["Targets"]] == [{"Fn::GetAtt": [queue_id, "Arn"]}] for r in rules)
    entries = [e["Properties"] for e in resources(template, "AWS::EKS::AccessEntry").values()]
    assert any(e.get("Type") == "EC2_LINUX" for e in entries)
    # Volcano shows Karpenter the gang's pods: no enqueue action.
    scheduler = yaml.safe_load(json.loads(charts["volcano"]["Values"])["custom"]["scheduler_config_override"])
    assert scheduler["actions"] == "allocate, backfill"
    assert "enqueue" not in VOLCANO_SCHEDULER_CONFIG


# -- managed node groups -----------------------------------------------------------------------------

def test_managed_node_groups_carry_cluster_autoscaler_node_templates():
    result = synthesized("trn1n.32xlarge+trn1.2xlarge")
    template = result.template_json("eks")
    charts = {helm_chart_name(c["Properties"]): c["Properties"] for c in resources(template, "Custom::AWSCDK-EKS-HelmChart").values()}
    assert "cluster-autoscaler" in charts
    assert "karpenter" not in charts
    groups = {n["Properties"]["Labels"].get("trainium-cdk/compute-group"): n["Properties"]
              for n in resources(template, "AWS::EKS::Nodegroup").values()}
    tag = "k8s.io/cluster-autoscaler/node-template"
    big, small = groups["big"]["Tags"], groups["small"]["Tags"]
    assert big[f"{tag}/resources/aws.amazon.com/neuron"] == "16"
    assert big[f"{tag}/resources/vpc.amazonaws.com/efa"] == "16"
    assert f"{tag}/resources/vpc.amazonaws.com/efa" not in small
    assert big[f"{tag}/label/trainium-cdk/compute-group"] == "big"
    assert big[f"{tag}/taint/aws.amazon.com/neuron"] == "true:NoSchedule"
    assert groups["big"]["ScalingConfig"]["MinSize"] == groups["big"]["ScalingConfig"]["DesiredSize"] == 0


def test_karpenter_keeps_no_idle_node_and_managed_may():
    from tests.support.helpers import config_with

    with pytest.raises(ConfigError, match="min_nodes"):
        config_with(group={"min_nodes": 1})
    assert config_with(group={"min_nodes": 1}, eks={"capacity": "managed"}).compute_groups[0].min_nodes == 1


# -- the bill ------------------------------------------------------------------------------------------

def test_trn_cost_prints_the_idle_floor_and_the_full_size_price_of_the_default_config():
    out, err = io.StringIO(), io.StringIO()
    assert main(["cost", "--config", "config/default.yaml"], out=out, err=err) == 0
    text = out.getvalue()
    assert "total idle floor" in text and "$     0.719/h" in text and "$      524.72/month" in text
    assert "4 x trn1.32xlarge" in text and "$    86.000/h" in text
    assert prices.PRICES_AS_OF in text


def test_the_readme_quotes_the_default_bill():
    from tests.support.readme import README, page

    readme = page("guide/cost.md")
    result = bill(load_config())
    # The front page quotes the idle floor too.
    assert f"${result.idle_hourly:,.2f} an hour" in README.read_text()
    assert f"${result.idle_hourly:,.2f} an hour" in readme
    assert f"${result.idle_monthly:,.0f} a month" in readme
    assert f"${result.groups[0].hourly:,.2f} an hour" in readme


def test_cost_is_region_aware_and_says_what_it_assumes():
    config = load_config()
    assert not any(line.assumed for line in bill(config).idle)
    elsewhere = bill(config, "eu-west-1")
    assert all(line.assumed for line in (*elsewhere.idle, *elsewhere.groups))
    out = io.StringIO()
    main(["cost", "--region", "eu-west-1"], out=out, err=io.StringIO())
    assert "* assumed price" in out.getvalue()


def test_cost_counts_every_interface_endpoint_the_network_creates():
    from trainium_cdk.constructs.network import INTERFACE_ENDPOINTS

    assert INTERFACE_ENDPOINT_COUNT == len(INTERFACE_ENDPOINTS)


def test_cost_prices_the_idle_backends(default_app):
    items = [line.item for line in bill(default_app.config).idle]
    assert any("Slurm head node" in i for i in items) and any("development instance" in i for i in items)
    # Volumes are billed while they exist: a stopped development instance still pays for its root volume.
    volumes = {line.item: line for line in bill(default_app.config).idle if "GiB gp3" in line.item}
    config = default_app.config
    dev = volumes[f"development instance root volume (1 x {config.instance.root_volume_gib} GiB gp3)"]
    assert dev.monthly == pytest.approx(config.instance.root_volume_gib * prices.EBS_GP3_GB_MONTH.usd)
    assert f"Slurm head node root volume (1 x {config.parallelcluster.head_node_root_volume_gib} GiB gp3)" in volumes
