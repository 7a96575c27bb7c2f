"""The EKS stack installs Volcano, the example image and the configured workloads."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.helpers import US_EAST_2, config_with, helm_chart_name, resources, synth, template_text
from tests.support.reachability import manifest_objects
from trainium_cdk.app.adapters.eks import workloads_options
from trainium_cdk.app.workloads import eks_image_build
from trainium_cdk.constructs.eks_workloads import BERT_EXAMPLE_DIR, EXAMPLE_DIR
from trainium_cdk.examples import offers_bert_example
from trainium_cdk.facts import versions


@pytest.fixture(scope="module")
def result():
    """The example images built (eks.example_images; the default builds none: see the tests at the end)."""
    return synth(
        config_with(
            eks={"example_images": True},
            workloads={
                "jobs": [
                    {"name": "bert", "cache_set": "bert", "precompile": True, "precompile_steps": 4},
                    {"name": "mlp", "nodes": 1, "cache_set": "mlp"},
                ],
                "data_loader": {"s3_uri": "s3://my-datasets/wiki/"},
                "shell": True,
                "tensorboard": True,
            }
        )
    )


def _manifests(template):
    return {
        k: v for k, v in resources(template, "Custom::AWSCDK-EKS-KubernetesResource").items()
    }


def _objects(template) -> list[dict]:
    """The Kubernetes objects of the stack's manifests, deploy-time values as their expressions."""
    return [o for m in _manifests(template).values() for o in manifest_objects(m["Properties"]["Manifest"])]


def _containers(job: dict) -> list[dict]:
    """The containers of a Job: of every task of a Volcano Job (several nodes), or of a Kubernetes Job's pod."""
    templates = [task["template"] for task in job["spec"]["tasks"]] if "tasks" in job["spec"] else [job["spec"]["template"]]
    return [c for template in templates for c in template["spec"]["containers"]]


def _image_uri(image: dict) -> dict:
    """The URI a Docker image asset (an assets.json entry) has once published, as the template writes it."""
    (destination,) = image["destinations"].values()
    return {"Fn::Sub": f"${{AWS::AccountId}}.dkr.ecr.{destination['region']}.${{AWS::URLSuffix}}/"
                       f"{destination['repositoryName']}:{destination['imageTag']}"}


def _lifecycle_count(repository: dict) -> int:
    """How many images a repository's one lifecycle rule keeps."""
    (rule,) = json.loads(repository["Properties"]["LifecyclePolicy"]["LifecyclePolicyText"])["rules"]
    assert rule["selection"]["countType"] == "imageCountMoreThan"
    return rule["selection"]["countNumber"]


def test_volcano_from_its_vendored_helm_chart(result):
    (chart,) = [c for c in resources(result.template_json("eks"), "Custom::AWSCDK-EKS-HelmChart").values()
                if helm_chart_name(c["Properties"]) == "volcano"]
    props = chart["Properties"]
    assert not {"Chart", "Repository", "Version"} & set(props)
    assert props["Namespace"] == "volcano-system"


def test_queue_and_jobs_wait_for_volcano_and_the_volume(result):
    template = result.template_json("eks")
    manifests = _manifests(template)
    (helm_id,) = [k for k, v in resources(template, "Custom::AWSCDK-EKS-HelmChart").items()
                  if helm_chart_name(v["Properties"]) == "volcano"]
    by_id = {k: v for k, v in manifests.items()}
    jobs = [k for k in by_id if "jobbert" in k or "jobmlp" in k]
    assert len(jobs) == 2
    for logical_id in jobs:
        depends = by_id[logical_id].get("DependsOn", [])
        assert helm_id in depends
        assert any("volcanoqueue" in d for d in depends)
        assert any("fsxstorage" in d for d in depends)


def test_jobs_use_the_example_image_asset(result):
    template = result.template_json("eks")
    jobs = {o["metadata"]["name"]: o for o in _objects(template) if o["kind"] == "Job"}
    assert {"bert", "mlp"} <= set(jobs)
    example = _image_uri(_images(result)["mlp"])  # the asset's repository and tag, resolved at deploy
    for name, steps in (("bert", "4"), ("mlp", "10")):  # the job's own step cap; neuron.precompile_steps by default
        containers = _containers(jobs[name])
        assert containers and all(c["image"] == example for c in containers), name
        for container in containers:
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["TRN_PRECOMPILE_STEPS"] == steps, name
    # Precompile asked of the launcher.
    assert {e["name"]: e.get("value") for e in _containers(jobs["bert"])[0]["env"]}["TRN_PRECOMPILE"] == "1"
    assert template["Outputs"]["ExampleImageUri"]["Value"] == example


def _images(result) -> dict[str, dict]:
    """The Docker image assets of the EKS stack, by the folder name of their build context's Dockerfile."""
    assets = json.loads((result.outdir / "t-eks.assets.json").read_text())
    found = {}
    for image in assets["dockerImages"].values():
        assert image["source"]["directory"].startswith("asset.")
        built = result.outdir / image["source"]["directory"]
        found["mlp" if (built / "train.py").exists() else "bert"] = {**image, "built": built}
    return found


def test_example_image_builds_from_the_example_folder(result):
    image = _images(result)["mlp"]
    built = image["built"]
    assert (built / "Dockerfile").exists() and (built / "train.py").exists()
    assert image["source"]["dockerBuildArgs"]["BASE_TAG"] == versions.XLA_TRACK.training_image_tag
    assert image["source"]["dockerBuildArgs"] == {"BASE_TAG": versions.XLA_TRACK.training_image_tag}
    # A public base: building needs no `docker login` (the DLC account's registries would).
    (base,) = [line.split()[1] for line in (built / "Dockerfile").read_text().splitlines() if line.startswith("FROM ")]
    assert base == f"{versions.NEURON_TRAINING_IMAGE_PUBLIC_REPOSITORY}:${{BASE_TAG}}"
    assert not [line for line in (built / "Dockerfile").read_text().splitlines() if versions.NEURON_DLC_ACCOUNT in line and not line.startswith("#")]
    assert image["source"]["platform"] == "linux/amd64"


def test_data_loader_reads_its_bucket_through_pod_identity(result):
    template = result.template_json("eks")
    associations = [a["Properties"] for a in resources(template, "AWS::EKS::PodIdentityAssociation").values()]
    (loader,) = [a for a in associations if a["ServiceAccount"] == "data-loader"]
    assert loader["Namespace"] == "training"
    role_id = loader["RoleArn"]["Fn::GetAtt"][0]
    (policy,) = [
        p["Properties"] for p in resources(template, "AWS::IAM::Policy").values()
        if p["Properties"]["Roles"] == [{"Ref": role_id}]
    ]
    statements = {st["Action"]: st for st in policy["PolicyDocument"]["Statement"]}
    assert set(statements) == {"s3:ListBucket", "s3:GetObject"}  # read only (tests/app/eks/test_scoped_grants.py)
    # Under its prefix.
    assert statements["s3:GetObject"]["Resource"] == {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::my-datasets/wiki/*"]]}
    assert statements["s3:ListBucket"]["Condition"] == {"StringLike": {"s3:prefix": ["wiki/*"]}}


def test_shell_and_tensorboard_installed(result):
    objects = {(o["kind"], o["metadata"]["name"]) for o in _objects(result.template_json("eks"))}
    assert {("Pod", "data-shell"), ("Deployment", "tensorboard"), ("Service", "tensorboard")} <= objects


def test_training_image_repository(result):
    template = result.template_json("eks")
    (repo,) = resources(template, "AWS::ECR::Repository").values()
    assert repo["DeletionPolicy"] == "Retain"
    props = repo["Properties"]
    assert props["ImageScanningConfiguration"] == {"ScanOnPush": True}
    assert props["ImageTagMutability"] == "IMMUTABLE"
    assert _lifecycle_count(repo) == 100
    assert "TrainingImageRepositoryUri" in template["Outputs"]


# -- the construct alone, from its props (no config) --------------------------------------------------


@pytest.fixture(scope="module")
def bare():
    import cdk8s
    from aws_cdk import App, RemovalPolicy, Stack
    from aws_cdk import aws_eks_v2 as eks
    from aws_cdk.assertions import Template
    from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer

    from trainium_cdk.charts.training import QUEUE_CHART_ID, VolcanoQueue, training_job
    from trainium_cdk.constructs.eks_workloads import TrainingWorkloads, TrainingWorkloadsOptions
    from trainium_cdk.facts.catalog import DEFAULT_CATALOG
    from trainium_cdk.facts.versions import KUBERNETES_VERSION
    from trainium_cdk.runtime.jobs import JobSpec

    stack = Stack(App(), "Bare")
    cluster = eks.Cluster(
        stack, "Cluster", version=eks.KubernetesVersion.of(KUBERNETES_VERSION),
        kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV35Layer(stack, "Kubectl")),
    )

    def charts(app, image):
        job = JobSpec(name="demo", instance=DEFAULT_CATALOG.get("trn1.32xlarge"), command=("train.py",), image=image,
                      nodes=2)
        return {QUEUE_CHART_ID: VolcanoQueue(app, QUEUE_CHART_ID, name="research"),
                "job-demo": training_job(app, "job-demo", job=job, queue="research")}

    from trainium_cdk.constructs.volcano import add_volcano

    workloads = TrainingWorkloads(
        stack, "Workloads", cluster=cluster, volcano=add_volcano(cluster),
        options=TrainingWorkloadsOptions(
            data_loader_bucket="bare-datasets", base_image_tag="2.0-test",
            repository_removal_policy=RemovalPolicy.DESTROY, images_kept=7,
        ),
    )
    workloads.add_charts(charts(cdk8s.App(), workloads.image_uri))
    return stack, workloads, Template.from_stack(stack).to_json()


def _logical_id(stack, construct):
    from aws_cdk import CfnResource

    while not isinstance(construct, CfnResource):
        construct = construct.node.default_child
    return stack.get_logical_id(construct)


def test_builds_alone_from_its_props(bare):
    stack, workloads, template = bare
    (repo,) = resources(template, "AWS::ECR::Repository").values()
    assert repo["DeletionPolicy"] == "Delete"
    assert _lifecycle_count(repo) == 7
    assert set(workloads.manifests) == {"volcano-queue", "job-demo"}
    # The job runs the image the construct builds, and waits for Volcano and its queue.
    (job,) = [o for o in stack.resolve(workloads.charts["job-demo"].to_json()) if o["kind"] == "Job"]
    assert job["spec"]["queue"] == "research"
    containers = _containers(job)
    assert containers and all(c["image"] == stack.resolve(workloads.image.image_uri) for c in containers)
    depends = template["Resources"][_logical_id(stack, workloads.manifests["job-demo"])]["DependsOn"]
    assert _logical_id(stack, workloads.volcano) in depends
    assert _logical_id(stack, workloads.manifests["volcano-queue"]) in depends
    (association,) = resources(template, "AWS::EKS::PodIdentityAssociation").values()
    assert (association["Properties"]["Namespace"], association["Properties"]["ServiceAccount"]) == (
        "training", "data-loader"
    )


def test_bad_options_name_the_prop():
    from trainium_cdk.constructs.eks_workloads import TrainingWorkloadsOptions
    from trainium_cdk.errors import ConfigError

    for kwargs, field in (({"images_kept": 0}, "images_kept"), ({"image_directory": "/nonexistent"}, "image_directory"),
                          ({"bert_image_directory": "/nonexistent"}, "bert_image_directory")):
        with pytest.raises(ConfigError) as err:
            TrainingWorkloadsOptions(**kwargs)
        assert err.value.field == f"TrainingWorkloadsOptions.{field}"


def test_bert_image_builds_the_pinned_sample_on_the_same_base(result):
    """The BERT-large example's image: a second asset from examples/bert (the Dockerfile that fetches the
    sample script by commit and sha256), on the same training image, its URI a stack output."""
    images = _images(result)
    assert set(images) == {"mlp", "bert"}
    bert = images["bert"]
    assert sorted(p.name for p in bert["built"].iterdir()) == ["Dockerfile"]
    dockerfile = (bert["built"] / "Dockerfile").read_text()
    assert dockerfile == (BERT_EXAMPLE_DIR / "Dockerfile").read_text()
    script = r"^ADD .*--checksum=sha256:[0-9a-f]{64} \$\{SAMPLE\}/dp_bert_large_hf_pretrain_hdf5.py "
    assert re.search(script, dockerfile, re.M)
    assert bert["source"]["dockerBuildArgs"] == {"BASE_TAG": versions.XLA_TRACK.training_image_tag}
    assert bert["source"]["platform"] == images["mlp"]["source"]["platform"] == "linux/amd64"
    outputs = result.template_json("eks")["Outputs"]
    assert outputs["BertImageUri"]["Value"] == _image_uri(bert)
    assert outputs["BertImageUri"]["Value"] != outputs["ExampleImageUri"]["Value"]
    # Staging BERT's ~48 GB corpus is a step a user takes once (dist/), not one every deploy repeats.
    assert not [k for k in _manifests(result.template_json("eks")) if "stagebertdata" in k.lower()]


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"group": {"instance_type": "trn1.2xlarge", "nodes": 1, "max_nodes": 1}}, "no EFA: no multi-node example"),
        ({**US_EAST_2, "neuron": {"track": "native"},
          "group": {"instance_type": "trn2.48xlarge", "az_ids": "use2-az3"}}, "native track: no torch-xla"),
        ({"eks": {"example_images": False}}, "no example images built (the default)"),
    ],
)
def test_no_bert_image_where_the_config_offers_no_bert_example(changes, why):
    config = config_with(**{"eks": {"example_images": True}, **changes})
    assert workloads_options(config).bert_image_directory is None, why
    assert workloads_options(config_with(eks={"example_images": True})).bert_image_directory == BERT_EXAMPLE_DIR


# -- the default: no image built, the MLP example's code from a ConfigMap ------------------------------------------


@pytest.fixture(scope="module")
def unbuilt():
    """The default config with the MLP example as two configured jobs, on one node and on two."""
    return synth(config_with(workloads={"jobs": [{"name": "mlp", "nodes": 1}, {"name": "mlp-two", "nodes": 2}]}))


def test_by_default_the_deploy_builds_no_image(unbuilt):
    """The quick path needs no Docker: no image asset, and the default training image is the track's Neuron
    training image from the public ECR Gallery (the base the example image would build FROM)."""
    assets = json.loads((unbuilt.outdir / "t-eks.assets.json").read_text())
    assert assets.get("dockerImages", {}) == {}
    image = versions.neuron_public_training_image("xla")
    assert unbuilt.template_json("eks")["Outputs"]["ExampleImageUri"]["Value"] == image
    assert eks_image_build(unbuilt.config) is None  # `trn doctor` asks for no container engine
    assert not offers_bert_example(unbuilt.config)  # BERT's image carries its script: only with the build


def test_the_mlp_jobs_mount_the_example_code_where_the_image_would_have_it(unbuilt):
    manifests = _manifests(unbuilt.template_json("eks"))
    (code,) = [json.loads(template_text(m["Properties"]["Manifest"])) for k, m in manifests.items() if "mlpexample" in k]
    ((config_map,),) = [code]
    assert config_map["kind"] == "ConfigMap" and config_map["metadata"] == {
        "name": "mlp-example", "namespace": "training", "labels": config_map["metadata"]["labels"]}
    assert config_map["data"] == {"train.py": (EXAMPLE_DIR / "train.py").read_text()}
    image = versions.neuron_public_training_image("xla")
    jobs = [json.loads(template_text(m["Properties"]["Manifest"])) for k, m in manifests.items() if "jobmlp" in k]
    assert jobs
    for (job,) in jobs:
        templates = [t["template"] for t in job["spec"]["tasks"]] if "tasks" in job["spec"] else [job["spec"]["template"]]
        for template in templates:
            pod = template["spec"]
            (container,) = pod["containers"]
            assert container["image"] == image
            assert {"name": "code", "mountPath": "/opt/trainium-cdk/examples/mlp", "readOnly": True} in container["volumeMounts"]
            assert {"name": "code", "configMap": {"name": "mlp-example"}} in pod["volumes"]
            assert "/opt/trainium-cdk/examples/mlp/train.py" in container["command"]
