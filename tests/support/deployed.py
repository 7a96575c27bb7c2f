"""What `make deploy` leaves in an account, made in moto from the cloud assembly: the README walkthroughs' AWS.

`cdk deploy` itself cannot run against moto to the end (it runs Lambda-backed custom resources, waits on
EKS and FSx, and moto's CloudFormation loses most outputs), so the walkthroughs' ``make deploy`` is a
listed substitution (tests/support/readme_exemptions.py) that calls :func:`deploy`: for every stack of cdk.out, in
the manifest's order, a CloudFormation stack whose outputs are the template's own output expressions
resolved against the physical ids below, and the resources that later README commands talk to, made for
real in moto from their template properties:

- ``AWS::EKS::Cluster`` -> an EKS cluster of that name (``aws eks update-kubeconfig``, ``trn connect``);
- ``AWS::Batch::ComputeEnvironment`` / ``JobQueue`` / ``JobDefinition`` -> the queue and the job
  definition (as registered from the template's properties) that ``trn submit --backend batch`` uses; the
  compute environment is UNMANAGED here (moto would otherwise validate subnets it does not have);
- ``AWS::Logs::LogGroup`` -> the log group (``trn logs``, ``aws logs tail``);
- ``AWS::EC2::Instance`` -> an instance of that type (on an image moto has: ``aws ec2 stop-instances``);
- ``AWS::ECR::Repository`` -> the repository (``trn image push``), ``AWS::S3::Bucket`` -> the bucket (``trn
  sync``), each under CloudFormation's lower-case name form when the template names none.

- ``AWS::CloudFormation::Stack`` (a CDK nested stack, such as each Batch compute group's) -> its template,
  from the cloud assembly, deployed the same way with the parameters the parent passes; its outputs are the
  parent's ``Outputs.<name>`` attributes.

Every other resource gets a deterministic physical id of its type's form (``subnet-…``, ``fs-…``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACCOUNT = "123456789012"
URL_SUFFIX = "amazonaws.com"
# Physical id forms of the types the outputs name: prefix + hex digits.
_ID_FORMS = {
    "AWS::EC2::VPC": ("vpc-", 17), "AWS::EC2::Subnet": ("subnet-", 17), "AWS::EC2::SecurityGroup": ("sg-", 17),
    "AWS::EC2::Instance": ("i-", 17), "AWS::FSx::FileSystem": ("fs-", 17), "AWS::EC2::LaunchTemplate": ("lt-", 17),
    "AWS::EC2::PlacementGroup": ("", 0),
}
# Types whose generated names CloudFormation writes in lower case (their services refuse upper case).
_LOWER_CASE_NAMES = {"AWS::ECR::Repository", "AWS::S3::Bucket"}
# Maps whose keys are the user's, not CloudFormation property names: kept as they are when converting.
_OPAQUE = {"Parameters", "Options", "Tags", "DockerLabels"}
# Where assembly_stacks puts a nested stack's template, in its resource's metadata.
NESTED_TEMPLATE = "harness:nested-template"


def stable(*parts: str, length: int = 17) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:length]


def api_shape(value: Any, key: str = "") -> Any:
    """CloudFormation's property shape to the API's: keys lowerCamelCase, opaque maps left alone."""
    if isinstance(value, dict):
        if key in _OPAQUE:
            return dict(value)
        return {k[:1].lower() + k[1:]: api_shape(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [api_shape(v, key) for v in value]
    return value


@dataclass
class Stack:
    name: str
    template: dict[str, Any]
    physical: dict[str, str] = field(default_factory=dict)
    attributes: dict[tuple[str, str], str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    parameters: dict[str, str] = field(default_factory=dict)


@dataclass
class Account:
    """The deployed state: stacks by name, their nested stacks by physical name, exports by name."""

    region: str
    client: Callable[[str], Any]
    stacks: dict[str, Stack] = field(default_factory=dict)
    exports: dict[str, str] = field(default_factory=dict)
    nested: dict[str, Stack] = field(default_factory=dict)

    def every_stack(self) -> list[Stack]:
        """The stacks and their nested stacks (a Batch compute group's resources are in its own)."""
        return [*self.stacks.values(), *self.nested.values()]

    # -- expressions ---------------------------------------------------------------------------------

    def resolve(self, stack: Stack, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(stack, v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) != 1:
            return {k: self.resolve(stack, v) for k, v in value.items()}
        ((fn, arg),) = value.items()
        if fn == "Ref":
            return self._ref(stack, arg)
        if fn == "Fn::GetAtt":
            logical, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
            return self._attribute(stack, logical, attribute)
        if fn == "Fn::Join":
            sep, parts = arg
            return sep.join(str(p) for p in self.resolve(stack, parts))
        if fn == "Fn::Select":
            index, items = arg
            return self.resolve(stack, items)[int(index)]
        if fn == "Fn::Split":
            sep, text = arg
            return str(self.resolve(stack, text)).split(sep)
        if fn == "Fn::ImportValue":
            return self.exports[self.resolve(stack, arg)]
        if fn == "Fn::Sub":
            text, names = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(stack, arg[1]))

            def one(match: re.Match) -> str:
                name = match.group(1)
                if name in names:
                    return str(names[name])
                if "." in name:
                    return str(self._attribute(stack, *name.split(".", 1)))
                return str(self._ref(stack, name))

            return re.sub(r"\$\{([^}!]+)\}", one, text)
        return {fn: self.resolve(stack, arg)}

    def _ref(self, stack: Stack, name: str) -> str:
        pseudo = {"AWS::Region": self.region, "AWS::AccountId": ACCOUNT, "AWS::URLSuffix": URL_SUFFIX,
                  "AWS::Partition": "aws", "AWS::StackName": stack.name, "AWS::NoValue": "",
                  "AWS::StackId": f"arn:aws:cloudformation:{self.region}:{ACCOUNT}:stack/{stack.name}/{stable(stack.name, length=36)}"}
        if name in pseudo:
            return pseudo[name]
        if name in stack.physical:
            return stack.physical[name]
        if name in stack.parameters:
            return stack.parameters[name]
        parameter = stack.template.get("Parameters", {}).get(name)
        if parameter is not None:
            return str(parameter.get("Default", ""))
        raise KeyError(f"{stack.name}: Ref {name} names nothing the harness deployed")

    def _attribute(self, stack: Stack, logical: str, attribute: str) -> str:
        if (logical, attribute) in stack.attributes:
            return stack.attributes[(logical, attribute)]
        physical = stack.physical[logical]
        kind = stack.template["Resources"][logical]["Type"]
        service = kind.split("::")[1].lower()
        arn = {
            "AWS::IAM::Role": f"arn:aws:iam::{ACCOUNT}:role/{physical}",
            "AWS::IAM::InstanceProfile": f"arn:aws:iam::{ACCOUNT}:instance-profile/{physical}",
            "AWS::ECR::Repository": f"arn:aws:ecr:{self.region}:{ACCOUNT}:repository/{physical}",
        }.get(kind, f"arn:aws:{service}:{self.region}:{ACCOUNT}:{physical}")
        value = {
            "Arn": arn,
            "GroupId": physical, "LustreMountName": stable(physical, length=8), "DNSName": f"{physical}.fsx.{self.region}.{URL_SUFFIX}",
            "GroupName": physical, "DefaultSecurityGroup": "sg-" + stable(physical),
        }.get(attribute, f"{physical}.{attribute}")
        stack.attributes[(logical, attribute)] = value
        return value

    # -- deploy --------------------------------------------------------------------------------------

    def deploy_stack(self, name: str, template: dict[str, Any]) -> Stack:
        stack = self._deploy(name, template)
        exports: dict[str, str] = {}
        for key, output in template.get("Outputs", {}).items():
            value = self.resolve(stack, output["Value"])
            stack.outputs[key] = str(value)
            if "Export" in output:
                exports[self.resolve(stack, output["Export"]["Name"])] = str(value)
        self.exports.update(exports)
        body = {
            "Resources": {"Deployed": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
            "Outputs": {
                key: {"Value": value, **({"Export": {"Name": export}} if (export := self._export_name(stack, key)) else {})}
                for key, value in stack.outputs.items()
            },
        }
        self.client("cloudformation").create_stack(StackName=name, TemplateBody=json.dumps(body))
        self.stacks[name] = stack
        return stack

    def _deploy(self, name: str, template: dict[str, Any], parameters: dict[str, str] | None = None) -> Stack:
        """A stack's resources (nested stacks first: the parent's other resources may read their outputs)."""
        stack = Stack(name, template, parameters=dict(parameters or {}))
        resources = template.get("Resources", {})
        for logical, resource in resources.items():
            stack.physical[logical] = self._physical_id(stack, logical, resource)
        nested_first = sorted(resources.items(), key=lambda item: NESTED_TEMPLATE not in item[1].get("Metadata", {}))
        for logical, resource in nested_first:
            self._make(stack, logical, resource)
        return stack

    def _export_name(self, stack: Stack, key: str) -> str | None:
        export = stack.template["Outputs"][key].get("Export")
        return self.resolve(stack, export["Name"]) if export else None

    def _physical_id(self, stack: Stack, logical: str, resource: dict[str, Any]) -> str:
        kind = resource["Type"]
        props = resource.get("Properties", {})
        named = {
            "AWS::EKS::Cluster": "Name", "AWS::Batch::JobQueue": "JobQueueName",
            "AWS::Logs::LogGroup": "LogGroupName",
            "AWS::ECR::Repository": "RepositoryName", "AWS::CloudWatch::Dashboard": "DashboardName",
        }.get(kind)
        if named and isinstance(props.get(named), str):
            return props[named]
        if kind == "AWS::Batch::JobDefinition":
            name = props.get("JobDefinitionName") or f"{logical}-{stable(stack.name, logical, length=12)}"
            return f"arn:aws:batch:{self.region}:{ACCOUNT}:job-definition/{name}:1"
        if kind == "AWS::Batch::JobQueue":
            return f"arn:aws:batch:{self.region}:{ACCOUNT}:job-queue/{logical}-{stable(logical, length=8)}"
        if kind == "AWS::Batch::ComputeEnvironment":  # Ref is the ARN (CloudFormation reference, Return values)
            name = props.get("ComputeEnvironmentName") or f"{logical}-{stable(stack.name, logical, length=12)}"
            return f"arn:aws:batch:{self.region}:{ACCOUNT}:compute-environment/{name}"
        prefix, length = _ID_FORMS.get(kind, (f"{stack.name}-{logical}-", 12))
        if not length:
            return f"{stack.name}-{logical}-{stable(logical, length=8)}"
        suffix = stable(stack.name, logical, length=length)
        if kind in _LOWER_CASE_NAMES:  # <stack>-<logical id>-<suffix>, lower case (and S3's 63 characters at most)
            prefix = prefix.lower()[: 63 - len(suffix)]
        return prefix + suffix

    def _make(self, stack: Stack, logical: str, resource: dict[str, Any]) -> None:
        kind = resource["Type"]
        if kind == "AWS::CloudFormation::Stack" and NESTED_TEMPLATE in resource.get("Metadata", {}):
            parameters = {k: str(v) for k, v in self.resolve(stack, resource["Properties"].get("Parameters", {})).items()}
            nested = self._deploy(stack.physical[logical], resource["Metadata"][NESTED_TEMPLATE], parameters)
            self.nested[nested.name] = nested
            for key, output in nested.template.get("Outputs", {}).items():
                stack.attributes[(logical, f"Outputs.{key}")] = str(self.resolve(nested, output["Value"]))
            return
        props = self.resolve(stack, resource.get("Properties", {}))
        physical = stack.physical[logical]
        if kind == "AWS::EKS::Cluster":
            cluster = self.client("eks").create_cluster(
                name=physical, roleArn=props["RoleArn"], version=props.get("Version", "1.35"),
                resourcesVpcConfig={"subnetIds": props["ResourcesVpcConfig"].get("SubnetIds", [])},
            )["cluster"]
            stack.attributes[(logical, "Arn")] = cluster["arn"]
            stack.attributes[(logical, "Endpoint")] = cluster["endpoint"]
        elif kind == "AWS::EC2::Instance":
            # The AMI the lookup would find is not in moto: any image moto has stands in (the instance's id is
            # what later commands use: stop, start, SSM targets).
            ec2 = self.client("ec2")
            image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
            answer = ec2.run_instances(ImageId=image, InstanceType=props["InstanceType"], MinCount=1, MaxCount=1)
            stack.physical[logical] = answer["Instances"][0]["InstanceId"]
        elif kind == "AWS::ECR::Repository":
            self.client("ecr").create_repository(
                repositoryName=physical, imageTagMutability=props.get("ImageTagMutability", "MUTABLE"))
        elif kind == "AWS::S3::Bucket":
            self.client("s3").create_bucket(Bucket=physical, CreateBucketConfiguration={"LocationConstraint": self.region})
        elif kind == "AWS::Logs::LogGroup":
            self.client("logs").create_log_group(logGroupName=physical)
        elif kind == "AWS::Batch::ComputeEnvironment":
            role = self._service_role()
            arn = self.client("batch").create_compute_environment(
                computeEnvironmentName=physical if "ComputeEnvironmentName" in props else f"ce-{stable(logical, length=12)}",
                type="UNMANAGED", state="ENABLED", serviceRole=role,
            )["computeEnvironmentArn"]
            stack.physical[logical] = arn
            stack.attributes[(logical, "ComputeEnvironmentArn")] = arn
        elif kind == "AWS::Batch::JobQueue":
            order = [{"order": o["Order"], "computeEnvironment": o["ComputeEnvironment"]}
                     for o in props["ComputeEnvironmentOrder"]]
            name = props.get("JobQueueName") or physical.rsplit("/", 1)[-1]
            answer = self.client("batch").create_job_queue(
                jobQueueName=name, state="ENABLED", priority=props.get("Priority", 1), computeEnvironmentOrder=order
            )
            stack.physical[logical] = name if "JobQueueName" in props else answer["jobQueueArn"]
            stack.attributes[(logical, "JobQueueArn")] = answer["jobQueueArn"]
        elif kind == "AWS::Batch::JobDefinition":
            shaped = api_shape({k: v for k, v in props.items() if k not in ("Tags", "PropagateTags")})
            shaped["jobDefinitionName"] = physical.rsplit("/", 1)[-1].rsplit(":", 1)[0]
            answer = self.client("batch").register_job_definition(**shaped)
            stack.physical[logical] = answer["jobDefinitionArn"]

    def _service_role(self) -> str:
        iam = self.client("iam")
        try:
            return iam.get_role(RoleName="harness-batch-service")["Role"]["Arn"]
        except iam.exceptions.NoSuchEntityException:
            return iam.create_role(RoleName="harness-batch-service", AssumeRolePolicyDocument="{}")["Role"]["Arn"]

    def destroy(self, names: list[str] | None = None) -> list[str]:
        """Delete the stacks named (default: every one), last deployed first (CloudFormation's order for
        dependent stacks)."""
        gone = []
        for name in reversed(list(self.stacks)):
            if names is None or name in names:
                self.client("cloudformation").delete_stack(StackName=name)
                gone.append(name)
        for name in gone:
            del self.stacks[name]
        return gone


def assembly_stacks(assembly: Path) -> list[tuple[str, dict[str, Any]]]:
    """(stack name, template) of every stack of a cloud assembly, dependencies first."""
    manifest = json.loads((assembly / "manifest.json").read_text())
    artifacts = {k: v for k, v in manifest["artifacts"].items() if v["type"] == "aws:cloudformation:stack"}
    ordered: list[str] = []

    def visit(key: str) -> None:
        if key in ordered:
            return
        for dependency in artifacts[key].get("dependencies", []):
            if dependency in artifacts:
                visit(dependency)
        ordered.append(key)

    for key in artifacts:
        visit(key)
    return [
        (artifacts[k].get("properties", {}).get("stackName", k),
         _with_nested(assembly, json.loads((assembly / artifacts[k]["properties"]["templateFile"]).read_text())))
        for k in ordered
    ]


def _with_nested(assembly: Path, template: dict[str, Any]) -> dict[str, Any]:
    """``template`` with each nested stack's template (the asset its TemplateURL names, ``<hash>.json``, which the
    assembly holds as a ``*.nested.template.json`` listed in an assets manifest) in the stack resource's metadata."""
    sources = {h: assembly / f["source"]["path"]
               for manifest in assembly.glob("*.assets.json")
               for h, f in json.loads(manifest.read_text()).get("files", {}).items()}
    for resource in template.get("Resources", {}).values():
        if resource["Type"] == "AWS::CloudFormation::Stack":
            url = json.dumps(resource["Properties"]["TemplateURL"])
            # A template of the project's (not one a service publishes, such as ParallelCluster's provider).
            for path in [path for h, path in sources.items() if f"/{h}.json" in url]:
                resource.setdefault("Metadata", {})[NESTED_TEMPLATE] = _with_nested(assembly, json.loads(path.read_text()))
    return template
