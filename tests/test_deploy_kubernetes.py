"""The Kubernetes manifests in deploy/kubernetes/: what the API server requires of each kind
(apps/v1 StatefulSet, v1 Service, batch/v1 Job, v1 PersistentVolumeClaim and ConfigMap), and
that the command lines, probes, ports, volumes and settings are the ones Eva takes.

The requirements checked are Kubernetes' own (kubernetes.io/docs/reference/kubernetes-api,
StatefulSet v1, Job v1; kubernetes.io/docs/concepts/workloads/controllers/statefulset;
checked 2026-12-07): a StatefulSet's selector must match its template's labels, every
volumeClaimTemplate needs a volumeMount of its name in a container, its pods' restartPolicy
may only be Always; a Job's may only be Never or OnFailure; the StatefulSet controller names
a pod's claim <template>-<statefulset>-<ordinal> and takes one of that name that exists.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from eva.cli.cmd_run import group_shards
from eva.cli.common import UserError, load_live_settings, load_settings
from eva.cli.main import build_parser
from eva.core.health import LIVE_PATH, READY_PATH
from eva.core.shard_groups import groups

ROOT = Path(__file__).resolve().parents[1]
KUBE = ROOT / "deploy" / "kubernetes"
ACCESS_MODES = {"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"}


def manifests() -> dict[str, dict[str, Any]]:
    """Every object in deploy/kubernetes/, by kind (each kind once), a claim by kind and name."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(KUBE.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            assert isinstance(document, dict), path
            assert {"apiVersion", "kind", "metadata"} <= set(document), path
            kind = document["kind"]
            if kind == "PersistentVolumeClaim":
                kind = f"{kind}/{document['metadata']['name']}"
            assert kind not in found, f"{kind} twice"
            found[kind] = document
    return found


@pytest.fixture(scope="module")
def kube() -> dict[str, dict[str, Any]]:
    return manifests()


def parsed(command: str, argv: list[str]) -> argparse.Namespace:
    """`eva COMMAND ARGV` parsed by Eva's own parser (it exits on a flag it does not take)."""
    assert argv[0] == command, argv
    return build_parser(command).parse_args(argv)


def only(items: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(items) == 1, items
    return items[0]


def test_every_object_is_of_a_known_kind_and_api_version(kube: dict[str, dict[str, Any]]) -> None:
    assert {kind: doc["apiVersion"] for kind, doc in kube.items()} == {
        "ConfigMap": "v1",
        "Job": "batch/v1",
        "PersistentVolumeClaim/data-eva-2": "v1",
        "PersistentVolumeClaim/eva-keys": "v1",
        "Service": "v1",
        "StatefulSet": "apps/v1",
    }
    for doc in kube.values():
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])


def test_the_statefulset_is_what_apps_v1_requires(kube: dict[str, dict[str, Any]]) -> None:
    sts, service = kube["StatefulSet"], kube["Service"]
    spec = sts["spec"]
    assert {"selector", "template", "serviceName"} <= set(spec)
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()  # the selector matches
    assert spec["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"  # headless, as a StatefulSet needs
    assert service["spec"]["selector"].items() <= labels.items()
    assert spec["podManagementPolicy"] == "OrderedReady"  # one pod identifies at a time
    pod = spec["template"]["spec"]
    assert pod.get("restartPolicy", "Always") == "Always"
    assert pod["terminationGracePeriodSeconds"] >= 30  # time to close and drain (never 0)
    container = only(pod["containers"])
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for claim in spec["volumeClaimTemplates"]:
        name = claim["metadata"]["name"]
        assert name in mounts and name not in volumes
        assert set(claim["spec"]["accessModes"]) <= ACCESS_MODES
        assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]  # one writer per directory
        assert claim["spec"]["resources"]["requests"]["storage"]
    claims = {c["metadata"]["name"] for c in spec["volumeClaimTemplates"]}
    assert set(mounts) <= claims | set(volumes)


def pod_of(kube: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], argparse.Namespace]:
    container = only(kube["StatefulSet"]["spec"]["template"]["spec"]["containers"])
    return container, parsed("run", container["args"])


def test_each_pod_runs_eva_with_the_shards_of_its_ordinal(kube: dict[str, dict[str, Any]]) -> None:
    sts = kube["StatefulSet"]
    container, args = pod_of(kube)
    assert args.shard_group_from_hostname and args.shard_count is not None
    replicas = sts["spec"]["replicas"]
    assert replicas == groups(args.shard_count, args.shards_per_group)
    owned = [group_shards(args, f"{sts['metadata']['name']}-{o}") for o in range(replicas)]
    assert sorted(s for shards in owned for s in shards) == list(range(args.shard_count))
    with pytest.raises(UserError):  # one pod more would be refused, not given nothing
        group_shards(args, f"{sts['metadata']['name']}-{replicas}")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    claim = only(sts["spec"]["volumeClaimTemplates"])["metadata"]["name"]
    assert str(args.data) == mounts[claim]  # the data directory is the pod's own volume


def test_the_probes_ask_the_port_and_paths_eva_answers(kube: dict[str, dict[str, Any]]) -> None:
    container, args = pod_of(kube)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("livenessProbe", LIVE_PATH), ("readinessProbe", READY_PATH)):
        get = container[probe]["httpGet"]
        assert get["path"] == path
        port = ports[get["port"]] if isinstance(get["port"], str) else get["port"]
        assert port == args.health_port
        assert container[probe]["timeoutSeconds"] >= 1
    service_port = only(kube["Service"]["spec"]["ports"])
    assert ports[service_port["targetPort"]] == args.health_port


def test_the_secrets_come_from_a_secret_and_the_settings_parse(
    kube: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    container, args = pod_of(kube)
    env = {e["name"]: e for e in container["env"]}
    for name in ("DISCORD_TOKEN", "ANTHROPIC_API_KEY"):
        assert "value" not in env[name]  # never written in the manifest
        assert env[name]["valueFrom"]["secretKeyRef"]["key"] == name
    assert env["ANTHROPIC_API_KEY"]["valueFrom"]["secretKeyRef"]["optional"] is True
    assert not env["DISCORD_TOKEN"]["valueFrom"]["secretKeyRef"].get("optional", False)
    # one master key for every pod and the reshard job: one key store, outside the data
    master = env["EVA_MASTER_KEY"]["valueFrom"]["secretKeyRef"]
    assert master["key"] == "EVA_MASTER_KEY" and not master.get("optional", False)
    keys = only([m for m in container["volumeMounts"]
                 if m["mountPath"] == env["EVA_KEYS"]["value"]])
    assert not Path(keys["mountPath"]).is_relative_to(args.data)
    job = only(kube["Job"]["spec"]["template"]["spec"]["containers"])
    job_env = {e["name"]: e for e in job["env"]}
    assert job_env["EVA_MASTER_KEY"] == env["EVA_MASTER_KEY"]
    job_keys = only([m for m in job["volumeMounts"]
                     if m["mountPath"] == job_env["EVA_KEYS"]["value"]])
    pod = kube["StatefulSet"]["spec"]["template"]["spec"]
    # people's keys live in one volume every pod and the job mount: never one that goes
    # with its pod (an emptyDir), never a data volume
    claim = kube["PersistentVolumeClaim/eva-keys"]
    assert "ReadWriteMany" in claim["spec"]["accessModes"]
    for spec, mount in ((pod, keys), (kube["Job"]["spec"]["template"]["spec"], job_keys)):
        volume = only([v for v in spec["volumes"] if v["name"] == mount["name"]])
        assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    configmap = kube["ConfigMap"]
    volume = only([v for v in pod["volumes"] if "configMap" in v])
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    mount = only([m for m in container["volumeMounts"] if m["name"] == volume["name"]])
    settings = Path(args.settings)
    assert str(settings.parent) == mount["mountPath"] and settings.name in configmap["data"]
    written = tmp_path / settings.name
    written.write_text(configmap["data"][settings.name])
    load_settings(written), load_live_settings(written)  # Eva reads it as it stands


def test_the_pods_run_as_the_images_user(kube: dict[str, dict[str, Any]]) -> None:
    uid = re.search(r"useradd [^\n]*--uid (\d+)", (ROOT / "deploy" / "Containerfile").read_text())
    assert uid is not None
    for kind in ("StatefulSet", "Job"):
        context = kube[kind]["spec"]["template"]["spec"]["securityContext"]
        assert context["runAsUser"] == context["fsGroup"] == int(uid.group(1))
        assert context["runAsNonRoot"] is True


def test_the_reshard_job_mounts_each_shards_volume_where_eva_reshard_reads_it(
    kube: dict[str, dict[str, Any]],
) -> None:
    sts, job = kube["StatefulSet"], kube["Job"]
    volume = kube["PersistentVolumeClaim/data-eva-2"]
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] in ("Never", "OnFailure")
    container = only(pod["containers"])
    assert container["image"] == only(sts["spec"]["template"]["spec"]["containers"])["image"]
    args = parsed("reshard", container["args"])
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
              if "persistentVolumeClaim" in v}
    template = only(sts["spec"]["volumeClaimTemplates"])
    # Shard i's directory is the volume of pod i, named as the StatefulSet names its claims.
    assert len(args.dirs) == args.shard_count
    for shard, directory in enumerate(args.dirs):
        name = f"{template['metadata']['name']}-{sts['metadata']['name']}-{shard}"
        assert claims[mounts[str(directory)]] == name
    # The claim made ahead for a new pod is one the StatefulSet will take as its own.
    assert volume["metadata"]["name"] in claims.values()
    new_ordinal = int(volume["metadata"]["name"].rsplit("-", 1)[1])
    assert new_ordinal >= sts["spec"]["replicas"]
    assert volume["spec"] == template["spec"]
    assert sts["spec"]["selector"]["matchLabels"].items() <= volume["metadata"]["labels"].items()
