"""deploy/: the image and manifests that put the driver under Felix in calico-node.

Every manifest goes through a real validator, and every validator is shown
broken input and must reject it:

* the calico-node DaemonSet patch, merged into a calico-node DaemonSet the way
  the API server merges a strategic-merge patch (the merge keys and strategies
  come from the Kubernetes schema itself; where kubectl is installed its own
  merge and kustomize's are compared with ours), is validated strictly
  against the Kubernetes schemas of every release from 1.31 (the oldest the
  supported Calico releases test on) to 1.37 with kubernetes-validate;
* the FelixConfiguration against deploy/schemas/felixconfiguration.yaml, a
  structural schema of our own with the types and patterns of Calico's CRD
  for the fields we use (nothing of Calico's is committed here), with
  jsonschema, unknown fields rejected as the API server's strict field
  validation rejects them, and its metadata against Kubernetes' ObjectMeta;
* deploy/Dockerfile with hadolint, and the probe script with shellcheck.

The probe script itself runs against real processes, and the paths, variables
and names that the files share are checked to agree with each other and with
the driver's own command line.

Why merge instead of shipping an example of the merged DaemonSet: the patch
is what operators apply, so the patch is what must be proved; a copy of
Calico's DaemonSet would only go stale.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from referencing import Registry, Resource

from dataplane import cli
from dataplane.cli.options import ENV_PREFIX, GLOBAL_OPTIONS
from dataplane.ops.address import listen_address
from dataplane.ops.server import FELIX_PORTS
from tests.conftest import REPO

DEPLOY = REPO / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
PATCH = DEPLOY / "calico-node-daemonset-patch.yaml"
FELIXCONFIG = DEPLOY / "felixconfiguration.yaml"
KUSTOMIZATION = DEPLOY / "kustomization.yaml"
CRD = DEPLOY / "schemas" / "felixconfiguration.yaml"
LIVEZ = DEPLOY / "dataplane-livez"

VENV = Path("/opt/dataplane")
DRIVER = f"{VENV}/bin/dataplane-driver"
LIVEZ_IN_IMAGE = f"{VENV}/bin/dataplane-livez"

# Kubernetes releases the manifests must be valid for: 1.31 (the kind node
# Calico v3.30 tests on) up to 1.37 (master's, and the newest
# kubernetes-validate knows).
K8S_VERSIONS = ("1.31", "1.32", "1.33", "1.34", "1.35", "1.36", "1.37")
NEWEST = K8S_VERSIONS[-1]

Obj = dict[str, Any]

# A calico-node DaemonSet as Calico's manifests shape it, cut down to what the
# patch meets and what the schema requires: the calico-node container with its
# probes, an init container on the same image (which must keep it), a volume.
BASE_DAEMONSET = """
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: calico-node
  namespace: kube-system
  labels: {k8s-app: calico-node}
spec:
  selector:
    matchLabels: {k8s-app: calico-node}
  updateStrategy:
    type: RollingUpdate
    rollingUpdate: {maxUnavailable: 1}
  template:
    metadata:
      labels: {k8s-app: calico-node}
    spec:
      hostNetwork: true
      serviceAccountName: calico-node
      terminationGracePeriodSeconds: 0
      priorityClassName: system-node-critical
      initContainers:
        - name: ebpf-bootstrap
          image: quay.io/calico/node:v3.31.7
          command: [calico-node, -init, -best-effort]
          securityContext: {privileged: true}
      containers:
        - name: calico-node
          image: quay.io/calico/node:v3.31.7
          env:
            - {name: DATASTORE_TYPE, value: kubernetes}
            - {name: FELIX_HEALTHENABLED, value: "true"}
          securityContext: {privileged: true}
          livenessProbe:
            exec:
              command: [/bin/calico-node, -felix-live, -bird-live]
            periodSeconds: 10
            initialDelaySeconds: 10
            failureThreshold: 6
            timeoutSeconds: 10
          readinessProbe:
            exec:
              command: [/bin/calico-node, -felix-ready, -bird-ready]
            periodSeconds: 10
            timeoutSeconds: 10
          volumeMounts:
            - {name: var-lib-calico, mountPath: /var/lib/calico}
      volumes:
        - name: var-lib-calico
          hostPath: {path: /var/lib/calico, type: DirectoryOrCreate}
"""


def load(path: Path) -> Obj:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), path
    return data


# --- Kubernetes schemas (kubernetes-validate's own copies) -------------------


def _schema_dir(version: str) -> Any:
    # kubernetes-validate keeps one directory of JSON schemas per release;
    # "-strict" forbids unknown fields. Its layout is its own, and pinned.
    return (
        resources.files("kubernetes_validate")
        / "kubernetes-json-schema"
        / f"v{version}.0-local-strict"
    )


@functools.cache
def k8s_definitions(version: str = NEWEST) -> Obj:
    """Kubernetes' type definitions (cached: treat as read-only)."""
    defs = json.loads((_schema_dir(version) / "_definitions.json").read_text())
    assert isinstance(defs, dict)
    return defs


@functools.cache
def k8s_schema(kind: str, api: str, version: str = NEWEST) -> Obj:
    schema = json.loads((_schema_dir(version) / f"{kind}-{api}.json").read_text())
    assert isinstance(schema, dict)
    return schema


def _resolve(schema: Obj, defs: Obj) -> Obj:
    while "$ref" in schema:
        schema = defs["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def strategic_merge(original: Any, patch: Any, schema: Obj, defs: Obj) -> Any:
    """``patch`` merged into ``original`` as a strategic-merge patch.

    The semantics the API server (and kustomize) apply, for what a patch
    without ``$patch`` directives can say: maps merge key by key (null
    deletes), a list whose schema says ``x-kubernetes-patch-strategy: merge``
    merges item by item on its ``x-kubernetes-patch-merge-key`` (new items
    appended), any other list is replaced whole, scalars are replaced.
    """
    schema = _resolve(schema, defs)
    if isinstance(patch, dict):
        directives = [key for key in patch if key.startswith("$")]
        assert not directives, f"patch directives are not modelled here: {directives}"
        result = dict(original) if isinstance(original, dict) else {}
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, value in patch.items():
            if value is None:
                result.pop(key, None)
                continue
            sub = properties.get(key, extra if isinstance(extra, dict) else {})
            result[key] = strategic_merge(result.get(key), value, sub, defs)
        return result
    if isinstance(patch, list):
        strategy = schema.get("x-kubernetes-patch-strategy", "").split(",")
        key = schema.get("x-kubernetes-patch-merge-key")
        if "merge" in strategy and key and isinstance(original, list):
            merged = list(original)
            for item in patch:
                at = next((i for i, old in enumerate(merged) if old.get(key) == item[key]), None)
                if at is None:
                    merged.append(strategic_merge(None, item, schema["items"], defs))
                else:
                    merged[at] = strategic_merge(merged[at], item, schema["items"], defs)
            return merged
        return copy.deepcopy(patch)
    return patch


def merged_daemonset(patch: Obj | None = None, base: Obj | None = None) -> Obj:
    """The DaemonSet that applying ``patch`` (deploy/'s by default) yields."""
    base = yaml.safe_load(BASE_DAEMONSET) if base is None else base
    patch = load(PATCH) if patch is None else patch
    for field in ("apiVersion", "kind"):
        assert patch[field] == base[field]
    for field in ("name", "namespace"):
        assert patch["metadata"][field] == base["metadata"][field]
    result = strategic_merge(base, patch, k8s_schema("daemonset", "apps-v1"), k8s_definitions())
    assert isinstance(result, dict)
    return result


def container(daemonset: Obj, name: str = "calico-node", key: str = "containers") -> Obj:
    found: list[Obj] = [c for c in daemonset["spec"]["template"]["spec"][key] if c["name"] == name]
    assert len(found) == 1, (name, key)
    return found[0]


def env_of(c: Obj) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


def validate_k8s(obj: Obj, version: str = NEWEST) -> None:
    kubernetes_validate.validate(obj, version, strict=True)


# --- The DaemonSet patch -----------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_patched_daemonset_is_valid(version: str) -> None:
    validate_k8s(yaml.safe_load(BASE_DAEMONSET), version)  # the base alone is, too
    validate_k8s(merged_daemonset(), version)


def test_the_patch_changes_the_calico_node_container_and_nothing_else() -> None:
    base = yaml.safe_load(BASE_DAEMONSET)
    merged = merged_daemonset()
    node = container(merged)
    patch_node = container(load(PATCH))

    assert node["image"] == patch_node["image"] != container(base)["image"]
    # The init container runs calico-node's own init: it keeps the stock image.
    assert container(merged, "ebpf-bootstrap", "initContainers") == container(
        base, "ebpf-bootstrap", "initContainers"
    )
    # Variables, mounts and volumes are added beside calico-node's own.
    assert env_of(node) == {**env_of(container(base)), **env_of(patch_node)}
    mounts = {m["mountPath"]: m["name"] for m in node["volumeMounts"]}
    assert mounts == {
        "/var/lib/calico": "var-lib-calico",
        "/var/lib/dataplane": "var-lib-dataplane",
    }
    volumes = {v["name"] for v in merged["spec"]["template"]["spec"]["volumes"]}
    assert volumes == {"var-lib-calico", "var-lib-dataplane"}
    # The probe's command is replaced; its timing and the readiness probe stay.
    probe = node["livenessProbe"]
    assert probe["exec"]["command"][0] == LIVEZ_IN_IMAGE
    assert probe["exec"]["command"][1:] == container(base)["livenessProbe"]["exec"]["command"]
    assert {k: v for k, v in probe.items() if k != "exec"} == {
        k: v for k, v in container(base)["livenessProbe"].items() if k != "exec"
    }
    assert node["readinessProbe"] == container(base)["readinessProbe"]
    assert node["securityContext"] == {"privileged": True}
    # Everything outside the pod template's containers and volumes is untouched.
    assert merged["metadata"] == base["metadata"]
    for key in set(base["spec"]) - {"template"}:
        assert merged["spec"][key] == base["spec"][key]
    pod, base_pod = merged["spec"]["template"]["spec"], base["spec"]["template"]["spec"]
    for key in set(base_pod) - {"containers", "volumes"}:
        assert pod[key] == base_pod[key]


def _broken_patches() -> Iterator[Any]:
    """A patch with one mistake, and the field the rejection must name."""

    def edit(path: str, value: Any) -> Obj:
        patch = load(PATCH)
        target: Any = container(patch)
        *parents, last = path.split(".")
        for part in parents:
            target = target[part]
        target[last] = value
        return patch

    yield pytest.param(
        edit("livenessProbe.periodSeconds", "10"), "periodSeconds", id="number as string"
    )
    yield pytest.param(
        edit("env", [{"name": "DATAPLANE_LOG_LEVEL", "value": 10}]),
        "value",
        id="env value not a string",
    )
    yield pytest.param(
        edit("livenessProbe.exec.command", LIVEZ_IN_IMAGE), "command", id="command not a list"
    )
    yield pytest.param(
        edit("securityContext", {"privileged": "yes"}), "privileged", id="bool as string"
    )
    yield pytest.param(edit("volumeMount", []), "volumeMount", id="misspelled field")
    patch = load(PATCH)
    patch["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["kind"] = "DirectoryOrCreate"
    yield pytest.param(patch, "kind", id="unknown field in a volume")


def _rejection_names(error: jsonschema.ValidationError, field: str) -> bool:
    return field in [str(p) for p in error.absolute_path] or repr(field) in error.message


@pytest.mark.parametrize(("patch", "field"), list(_broken_patches()))
def test_a_broken_patch_is_rejected(patch: Obj, field: str) -> None:
    with pytest.raises(kubernetes_validate.ValidationError) as rejected:
        validate_k8s(merged_daemonset(patch))
    assert _rejection_names(rejected.value, field), rejected.value.message


def test_the_merge_follows_the_schemas_merge_keys() -> None:
    # The merge is driven by the schema, not by names written here: a
    # container or mount given twice merges into one, a list the schema does
    # not mark as merging (the probe's command) is replaced.
    patch: Obj = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "calico-node", "namespace": "kube-system"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "calico-node",
                            "volumeMounts": [{"name": "renamed", "mountPath": "/var/lib/calico"}],
                            "readinessProbe": {
                                "exec": {"command": ["true"]},
                                "timeoutSeconds": None,
                            },
                        }
                    ]
                }
            }
        },
    }
    node = container(merged_daemonset(patch))
    assert node["volumeMounts"] == [{"name": "renamed", "mountPath": "/var/lib/calico"}]
    assert node["readinessProbe"] == {"exec": {"command": ["true"]}, "periodSeconds": 10}


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the cross-check against its merge needs it")
    return kubectl


def _normalized(obj: Any) -> Any:
    """Lists of named things sorted by name (kubectl prepends what it adds)."""
    if isinstance(obj, dict):
        return {k: _normalized(v) for k, v in obj.items()}
    if isinstance(obj, list):
        items = [_normalized(v) for v in obj]
        for key in ("name", "mountPath"):
            if items and all(isinstance(v, dict) and key in v for v in items):
                return sorted(items, key=lambda v: str(v[key]))
        return items
    return obj


def test_kubectl_merges_the_patch_the_same_way(tmp_path: Path) -> None:
    kubectl = _kubectl()
    base = tmp_path / "daemonset.yaml"
    base.write_text(BASE_DAEMONSET)
    out = subprocess.run(
        [
            kubectl,
            "patch",
            "--local",
            "-f",
            str(base),
            "--type=strategic",
            "-o",
            "json",
            "--patch-file",
            str(PATCH),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert _normalized(json.loads(out.stdout)) == _normalized(merged_daemonset())


def test_the_kustomization_renders_the_patched_daemonset(tmp_path: Path) -> None:
    kubectl = _kubectl()
    shutil.copy(PATCH, tmp_path / PATCH.name)
    # As an operator edits it: the image they pushed.
    kustomization = load(KUSTOMIZATION)
    kustomization["images"][0].update(newName="registry.test/ours", newTag="v3.31.7-test")
    (tmp_path / KUSTOMIZATION.name).write_text(yaml.safe_dump(kustomization))
    # The operator's calico.yaml: here a DaemonSet and something else.
    (tmp_path / "calico.yaml").write_text(
        BASE_DAEMONSET + "---\napiVersion: v1\nkind: ServiceAccount\n"
        "metadata: {name: calico-node, namespace: kube-system}\n"
    )
    out = subprocess.run(
        [kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, check=True
    )
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert sorted(d["kind"] for d in docs) == ["DaemonSet", "ServiceAccount"]
    daemonset = next(d for d in docs if d["kind"] == "DaemonSet")
    for version in (K8S_VERSIONS[0], NEWEST):
        validate_k8s(daemonset, version)

    assert container(daemonset)["image"] == "registry.test/ours:v3.31.7-test"
    expected = merged_daemonset()
    container(expected)["image"] = "registry.test/ours:v3.31.7-test"
    assert _normalized(daemonset) == _normalized(expected)


def test_the_kustomization_names_the_patch_and_its_image() -> None:
    kustomization = load(KUSTOMIZATION)
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    assert kustomization["resources"] == ["calico.yaml"]  # the operator's manifest
    assert [p["path"] for p in kustomization["patches"]] == [PATCH.name]
    (image,) = kustomization["images"]
    assert container(load(PATCH))["image"].rsplit(":", 1)[0] == image["name"]


# --- The FelixConfiguration --------------------------------------------------


def _strict(schema: Any) -> Any:
    """A CRD structural schema as JSON Schema, unknown fields rejected.

    The API server rejects unknown fields under strict field validation
    (kubectl's default); JSON Schema would let them through, so every object
    that lists its properties gets ``additionalProperties: false``. An
    int-or-string has no ``type``; nullable adds null.
    """
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if "properties" in out:
        out["properties"] = {k: _strict(v) for k, v in out["properties"].items()}
        if "additionalProperties" not in out and not out.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            out["additionalProperties"] = False
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _strict(out["additionalProperties"])
    if "items" in out:
        out["items"] = _strict(out["items"])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in out:
            out[key] = [_strict(v) for v in out[key]]
    if out.get("x-kubernetes-int-or-string") and "type" not in out and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if isinstance(out.get("pattern"), str):
        # Go's regexp takes a flag group anywhere (Calico writes "^(?i)(A|B)?$");
        # Python only at the start, where it means the same here.
        out["pattern"] = re.sub(r"^\^\(\?([a-z]+)\)", r"(?\1)^", out["pattern"])
    return out


def felixconfiguration_validator() -> jsonschema.protocols.Validator:
    crd = load(CRD)
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["spec"]["names"]["kind"] == "FelixConfiguration"
    (served,) = [v for v in crd["spec"]["versions"] if v["served"]]
    schema = _strict(served["schema"]["openAPIV3Schema"])
    # metadata is only `type: object` in a CRD: check it as Kubernetes'
    # ObjectMeta, from the same schemas the DaemonSet is validated against.
    defs = k8s_definitions()
    schema["properties"]["metadata"] = {
        "$ref": defs["$id"] + "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    }
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
    jsonschema.Draft202012Validator.check_schema(schema)
    registry: Registry[Any] = Resource.from_contents(defs) @ Registry()
    return jsonschema.Draft202012Validator(schema, registry=registry)


def test_the_felixconfiguration_matches_calicos_crd() -> None:
    config = load(FELIXCONFIG)
    felixconfiguration_validator().validate(config)
    crd = load(CRD)
    # The projectcalico.org/v3 resource (calico-apiserver, or v3.32's v3 CRD);
    # the CRD is cluster-scoped and Felix reads the one named `default`.
    assert (config["apiVersion"], config["kind"]) == ("projectcalico.org/v3", "FelixConfiguration")
    assert crd["spec"]["scope"] == "Cluster" and "namespace" not in config["metadata"]
    assert config["metadata"]["name"] == "default"
    assert config["spec"] == {"useInternalDataplaneDriver": False, "dataplaneDriver": DRIVER}
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["useInternalDataplaneDriver"]["type"] == "boolean"
    assert spec["properties"]["dataplaneDriver"]["type"] == "string"


def _broken_felixconfigurations() -> Iterator[Any]:
    """A FelixConfiguration with one mistake, and the field the rejection must name."""

    def edit(**spec: Any) -> Obj:
        config = load(FELIXCONFIG)
        config["spec"].update(spec)
        return config

    yield pytest.param(
        edit(useInternalDataplaneDriver="false"), "useInternalDataplaneDriver", id="bool as string"
    )
    yield pytest.param(edit(dataplaneDriver=[DRIVER]), "dataplaneDriver", id="a list")
    yield pytest.param(edit(dataplaneDriverPath=DRIVER), "dataplaneDriverPath", id="unknown field")
    yield pytest.param(edit(natPortRange=[1, 2]), "natPortRange", id="not an int-or-string")
    yield pytest.param(
        edit(logSeverityScreen="Loud"), "logSeverityScreen", id="refused by its pattern"
    )
    config = load(FELIXCONFIG)
    config["metadata"]["nmae"] = "default"
    yield pytest.param(config, "nmae", id="misspelled metadata")
    config = load(FELIXCONFIG)
    del config["spec"]
    yield pytest.param(config, "spec", id="no spec")


@pytest.mark.parametrize(("config", "field"), list(_broken_felixconfigurations()))
def test_a_broken_felixconfiguration_is_rejected(config: Obj, field: str) -> None:
    with pytest.raises(jsonschema.ValidationError) as rejected:
        felixconfiguration_validator().validate(config)
    assert _rejection_names(rejected.value, field), rejected.value.message


def test_our_felixconfiguration_schema_says_what_it_is() -> None:
    header = CRD.read_text().split("apiVersion:", 1)[0]
    for fact in ("written for this project", "v3.30.7", "master", "refused"):
        assert fact in header


# --- What the files share ----------------------------------------------------


def test_the_driver_path_is_the_same_everywhere() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    script = Path(DRIVER).name
    assert project["project"]["scripts"][script] == "dataplane.cli:main"
    dockerfile = DOCKERFILE.read_text()
    assert f'uv venv --python "${{PYTHON_VERSION}}" {VENV}' in dockerfile
    assert f"{DRIVER} version" in dockerfile
    env = env_of(container(load(PATCH)))
    assert env["FELIX_DATAPLANEDRIVER"] == DRIVER == load(FELIXCONFIG)["spec"]["dataplaneDriver"]
    # The pod's switch is the FelixConfiguration's, in Felix's env spelling.
    assert env["FELIX_USEINTERNALDATAPLANEDRIVER"] == "false"
    assert load(FELIXCONFIG)["spec"]["useInternalDataplaneDriver"] is False


def test_every_dataplane_variable_is_an_option_the_driver_accepts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = env_of(container(load(PATCH)))
    ours = {k: v for k, v in env.items() if k.startswith(ENV_PREFIX)}
    assert ours, "the patch sets no DATAPLANE_* variable"
    known = {option.env for option in GLOBAL_OPTIONS}
    assert set(ours) <= known
    # The values parse: a bad one would be exit 2 (SystemExit) here.
    assert cli.main(["version"], environ=ours) == 0
    capsys.readouterr()


def test_the_sysctl_state_is_kept_on_the_host() -> None:
    patch = load(PATCH)
    node = container(patch)
    state = Path(env_of(node)["DATAPLANE_SYSCTL_STATE"])
    (mount,) = [m for m in node["volumeMounts"] if state.is_relative_to(m["mountPath"])]
    (volume,) = [
        v for v in patch["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]
    ]
    assert volume["hostPath"]["path"] == mount["mountPath"]
    assert volume["hostPath"]["type"] == "DirectoryOrCreate"


def test_the_readme_commands_say_what_the_files_say() -> None:
    readme = (DEPLOY / "README.md").read_text()
    assert "docker build -f deploy/Dockerfile" in readme
    # calicoctl takes its patch as JSON: the same spec as felixconfiguration.yaml.
    (found,) = re.findall(r"calicoctl patch felixconfiguration default --patch '([^']*)'", readme)
    assert json.loads(found) == {"spec": load(FELIXCONFIG)["spec"]}


# --- The image recipe --------------------------------------------------------


def _venv_tool(name: str) -> str:
    tool = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert tool is not None, (
        f"{name} is not installed: `make test` installs it (pyproject dev extra)"
    )
    return tool


def hadolint(dockerfile: Path, tmp_path: Path) -> tuple[int, list[Obj]]:
    config = tmp_path / "hadolint.yaml"
    config.write_text("ignored: []\n")  # no user or repository config applies
    out = subprocess.run(
        [
            _venv_tool("hadolint"),
            "-c",
            str(config),
            "-t",
            "style",
            "-f",
            "json",
            "--no-color",
            str(dockerfile),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.returncode, json.loads(out.stdout or "[]")


def test_the_dockerfile_passes_hadolint(tmp_path: Path) -> None:
    assert hadolint(DOCKERFILE, tmp_path) == (0, [])


@pytest.mark.parametrize(
    ("old", "new", "rule"),
    [
        ("WORKDIR /src\n", "RUN cd /src\n", "DL3003"),
        (
            'LABEL org.opencontainers.image.title="',
            'USER root\nLABEL org.opencontainers.image.title="',
            "DL3002",
        ),
        ('command -v "$tool"', 'command -v "$(echo "$tool")"', "SC2116"),
        ("FROM ${UV_IMAGE} AS uv", "FROM ghcr.io/astral-sh/uv AS uv", "DL3006"),
    ],
    ids=["cd instead of WORKDIR", "USER root", "shell in RUN (shellcheck)", "untagged image"],
)
def test_hadolint_rejects_a_flawed_dockerfile(
    tmp_path: Path, old: str, new: str, rule: str
) -> None:
    text = DOCKERFILE.read_text()
    assert old in text
    flawed = tmp_path / "Dockerfile"
    flawed.write_text(text.replace(old, new, 1))
    rc, findings = hadolint(flawed, tmp_path)
    assert rc != 0
    assert rule in {f["code"] for f in findings}


def _args(dockerfile: str) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", dockerfile, re.MULTILINE))


def test_every_image_is_pinned_and_the_base_is_a_supported_release() -> None:
    args = _args(DOCKERFILE.read_text())
    images = {k: v for k, v in args.items() if k.endswith("_IMAGE")}
    assert set(images) == {"CALICO_NODE_IMAGE", "BUILD_IMAGE", "UV_IMAGE"}
    for name, image in images.items():
        tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
        assert tag and tag != "latest", f"{name}={image} is not pinned"
    assert re.fullmatch(r"quay\.io/calico/node:v3\.3[0-3]\.\d+", images["CALICO_NODE_IMAGE"])
    # FROM lines name only those (and build stages).
    froms = re.findall(r"^FROM (\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    assert froms == ["${UV_IMAGE}", "${BUILD_IMAGE}", "${CALICO_NODE_IMAGE}"]


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    dockerfile = DOCKERFILE.read_text()
    sources = [
        src
        for line in re.findall(r"^COPY (.+)$", dockerfile, re.MULTILINE)
        if "--from=" not in line
        for src in line.split()[:-1]
        if not src.startswith("--")
    ]
    assert sorted(sources) == [
        "README.md",
        "dataplane/",
        "deploy/dataplane-livez",
        "pyproject.toml",
    ]
    # pyproject's readme must be in the context for the wheel to build.
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["readme"] in sources
    ignore = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()]
    assert "*" in ignore  # everything else stays out (.venv, .git, ...)
    for src in sources:
        assert f"!{src}" in ignore
        assert (REPO / src).exists()
    # The probe the patch runs is the file the image installs there.
    assert f"COPY --chmod=0755 deploy/dataplane-livez {LIVEZ_IN_IMAGE}" in dockerfile


# --- The liveness probe ------------------------------------------------------


def test_the_probe_script_passes_shellcheck() -> None:
    out = subprocess.run(
        [_venv_tool("shellcheck"), "--severity=style", str(LIVEZ)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout


def test_shellcheck_rejects_a_flawed_script(tmp_path: Path) -> None:
    flawed = tmp_path / "livez"
    flawed.write_text(LIVEZ.read_text().replace('-e "$driver"', "-e $driver"))
    out = subprocess.run(
        [_venv_tool("shellcheck"), "--severity=style", str(flawed)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode != 0 and "SC2086" in out.stdout


def livez(env: Mapping[str, str], *check: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/sh", str(LIVEZ), *check],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def exits(status: int) -> tuple[str, ...]:
    """A stand-in for calico-node's own check that exits with ``status``."""
    return ("/bin/sh", "-c", f"exit {status}")


@pytest.fixture
def fake_driver(tmp_path: Path) -> Iterator[str]:
    """A running process whose command line has a driver path as an argument.

    What Felix starts: the kernel runs the console script's interpreter with
    the script's path as its first argument.
    """
    path = str(tmp_path / "bin" / "dataplane-driver")
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", path], stdin=subprocess.PIPE
    )
    try:
        yield path
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)


def test_the_probe_passes_while_the_driver_runs(fake_driver: str) -> None:
    external = {"FELIX_USEINTERNALDATAPLANEDRIVER": "false", "FELIX_DATAPLANEDRIVER": fake_driver}
    assert livez(external).returncode == 0
    # Then calico-node's own check decides.
    assert livez(external, *exits(0)).returncode == 0
    assert livez(external, *exits(3)).returncode == 3


@pytest.mark.parametrize("spelling", ["false", "False", "0", "no", "N", "f"])
def test_the_probe_fails_when_the_driver_is_not_running(tmp_path: Path, spelling: str) -> None:
    missing = str(tmp_path / "bin" / "dataplane-driver")
    out = livez(
        {"FELIX_USEINTERNALDATAPLANEDRIVER": spelling, "FELIX_DATAPLANEDRIVER": missing}, *exits(0)
    )
    assert out.returncode == 1
    assert out.stderr == f"dataplane-livez: no process is running {missing}\n"


def test_the_probe_matches_the_whole_path(fake_driver: str) -> None:
    # A process running a path that is a prefix of the driver's, or extends
    # it, is not the driver.
    for other in (fake_driver[:-1], fake_driver + "-old"):
        env = {"FELIX_USEINTERNALDATAPLANEDRIVER": "false", "FELIX_DATAPLANEDRIVER": other}
        assert livez(env).returncode == 1


@pytest.mark.parametrize("setting", [None, "true", "1", "yes"])
def test_with_the_internal_dataplane_only_calico_nodes_check_counts(
    tmp_path: Path, setting: str | None
) -> None:
    env = {"FELIX_DATAPLANEDRIVER": str(tmp_path / "absent")}
    if setting is not None:
        env["FELIX_USEINTERNALDATAPLANEDRIVER"] = setting
    assert livez(env).returncode == 0
    assert livez(env, *exits(4)).returncode == 4


def test_the_probe_looks_for_the_driver_felix_runs_by_default() -> None:
    # Without FELIX_DATAPLANEDRIVER in its environment the probe looks for
    # the image's driver path, the one every file here names.
    assert f"${{FELIX_DATAPLANEDRIVER:-{DRIVER}}}" in LIVEZ.read_text()
    assert os.access(LIVEZ, os.X_OK)


@pytest.fixture
def driver_health(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A running "driver" whose ``health`` command answers as ``status`` says."""
    status = tmp_path / "status"
    status.write_text("0")
    path = tmp_path / "bin" / "dataplane-driver"
    path.parent.mkdir()
    path.write_text(f'#!/bin/sh\n[ "$1" = health ] && exit "$(cat {status})"\nexit 9\n')
    path.chmod(0o755)
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", str(path)], stdin=subprocess.PIPE
    )
    try:
        yield str(path), status
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)


def test_the_probe_asks_the_driver_when_it_serves_livez(
    driver_health: tuple[str, Path],
) -> None:
    path, status = driver_health
    env = {
        "FELIX_USEINTERNALDATAPLANEDRIVER": "false",
        "FELIX_DATAPLANEDRIVER": path,
        "DATAPLANE_LISTEN": "127.0.0.1:9095",
    }
    assert livez(env, *exits(0)).returncode == 0
    status.write_text("1")  # /livez 503: the driver runs but is stuck
    out = livez(env, *exits(0))
    assert (out.returncode, out.stderr) == (1, f"dataplane-livez: {path} is not live\n")
    # Without DATAPLANE_LISTEN there is no /livez to ask.
    del env["DATAPLANE_LISTEN"]
    assert livez(env, *exits(0)).returncode == 0


def test_the_patch_serves_livez_on_loopback_off_felixs_ports() -> None:
    address = listen_address(env_of(container(load(PATCH)))["DATAPLANE_LISTEN"])
    assert address.host == "127.0.0.1"
    assert address.port not in FELIX_PORTS


def test_the_license_pyproject_names_is_in_the_repository() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    for name in project["license-files"]:
        text = (REPO / name).read_text()
        assert "Apache License" in text and "Version 2.0, January 2004" in text
