"""The checks of deploy/kubernetes that no off-the-shelf tool makes. deploy/kubernetes/check runs
them in .venv-deploy, on the manifests kustomize rendered, so they see what would be applied.

  lint.py overlay RENDERED.yaml
      moat.toml (from the ConfigMap) against the repository's moat.schema.json; every
      ${secret:NAME} it uses present in the Secret's secrets.toml; terminationGracePeriodSeconds
      covering the preStop sleep, the longest deadline_ms and a margin; the objects' names and
      ports meeting (Services, the Ingress, NetworkPolicies, --http, [cluster] redis); every
      checkov skip annotation naming one check and saying why
  lint.py same SINGLE.yaml REPLICATED.yaml
      the two overlays' moat.toml alike but for [cluster], which only the replicated one has
  lint.py canary RENDERED.yaml OUT.yaml
      a copy whose moat container's securityContext is misspelled: the schema validation and
      checkov must both refuse it, which shows they read these files at all
  lint.py checkov REPORT.json clean|failing
      checkov's JSON report: no failed check and some passed (clean), or some failed (failing)

Each exits 1 with the reasons on stderr when its check fails.
"""

import base64
import json
import math
import re
import sys
import tomllib
from pathlib import Path

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[2]
# moat's default deadline_ms when a plugin sets none (sandbox::limits::Limits::default).
DEFAULT_DEADLINE_MS = 30000
# What a drain needs beyond its longest call: the last answers written, the process gone.
DRAIN_MARGIN_SECONDS = 10
SKIP_PREFIXES = ("checkov.io/skip", "bridgecrew.io/skip", "cortex.io/skip")
# checkov splits the value at "=": one check id, then the reason, which may not hold a "=".
SKIP_VALUE = re.compile(r"^CKV2?_K8S_\d+=[^=]{20,}$")
SECRET_REFERENCE = re.compile(r"\$\{secret:([^}]+)\}")

problems: list[str] = []


def problem(text: str) -> None:
    problems.append(text)


def documents(path: str) -> list[dict]:
    with open(path) as file:
        return [doc for doc in yaml.safe_load_all(file) if doc]


def one(docs: list[dict], kind: str, name: str) -> dict:
    """The document of this kind named `name`, or `name` and the hash suffix kustomize gives a
    generated ConfigMap or Secret."""
    named = re.compile(re.escape(name) + r"(-[a-z0-9]{10})?")
    found = [d for d in docs if d["kind"] == kind and named.fullmatch(d["metadata"]["name"])]
    if len(found) != 1:
        sys.exit(f"lint: expected one {kind} {name}, found {len(found)}")
    return found[0]


def moat_toml(docs: list[dict]) -> dict:
    return tomllib.loads(one(docs, "ConfigMap", "moat-config")["data"]["moat.toml"])


def strings(value):
    """Every string in a parsed TOML value, however deep."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def check_schema(config: dict) -> None:
    schema = json.loads((REPO / "moat.schema.json").read_text())
    checked = dict(config)
    if "cluster" in checked and "cluster" not in schema.get("properties", {}):
        # [cluster] is newer than the committed schema; the rest is still checked.
        print("lint: moat.schema.json has no [cluster] yet: checked without it")
        del checked["cluster"]
    validator = jsonschema.Draft202012Validator(schema)
    for error in sorted(validator.iter_errors(checked), key=lambda e: list(e.path)):
        where = "/".join(str(p) for p in error.path) or "(top)"
        problem(f"moat.toml {where}: {error.message}")


def check_secrets(docs: list[dict], config: dict) -> None:
    secret = one(docs, "Secret", "moat-secrets")
    text = base64.b64decode(secret["data"]["secrets.toml"]).decode()
    secrets = tomllib.loads(text)
    for name, value in secrets.items():
        if not isinstance(value, str):
            problem(f"secrets.toml {name}: moat takes strings only")
    for name in sorted({m for s in strings(config) for m in SECRET_REFERENCE.findall(s)}):
        if name not in secrets:
            problem(f"moat.toml uses ${{secret:{name}}}, which the Secret's secrets.toml lacks")


def check_grace(docs: list[dict], config: dict) -> None:
    pod = one(docs, "Deployment", "moat")["spec"]["template"]["spec"]
    grace = pod.get("terminationGracePeriodSeconds", 30)
    moat = next(c for c in pod["containers"] if c["name"] == "moat")
    sleep = moat.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds")
    if sleep is None:
        problem("the moat container has no preStop sleep: SIGTERM would come before the "
                "endpoints are updated")
        sleep = 0
    deadlines = [p.get("deadline_ms", DEFAULT_DEADLINE_MS) for p in config["plugins"].values()]
    longest = math.ceil(max(deadlines, default=DEFAULT_DEADLINE_MS) / 1000)
    needed = sleep + longest + DRAIN_MARGIN_SECONDS
    if grace < needed:
        problem(f"terminationGracePeriodSeconds {grace} < {needed} = preStop {sleep} s + the "
                f"longest deadline {longest} s + {DRAIN_MARGIN_SECONDS} s: a call could be cut")
    else:
        print(f"lint: grace period {grace} s covers preStop {sleep} s + deadline {longest} s "
              f"+ {DRAIN_MARGIN_SECONDS} s")


def check_skips(docs: list[dict]) -> None:
    for doc in docs:
        annotated = [doc["metadata"]]
        template = doc.get("spec", {}).get("template", {})
        if isinstance(template, dict) and "metadata" in template:
            annotated.append(template["metadata"])
        for metadata in annotated:
            for key, value in (metadata.get("annotations") or {}).items():
                if not key.startswith(SKIP_PREFIXES):
                    continue
                what = f"{doc['kind']}/{doc['metadata']['name']} {key}"
                if not SKIP_VALUE.match(str(value)):
                    problem(f"{what}: give `CKV_K8S_N=why` (one check, a reason of 20 "
                            f"characters or more, no '='), not {value!r}")
                else:
                    print(f"lint: {what}: {value}")


def pods(docs: list[dict], selector: dict) -> list[dict]:
    """The pod templates of the Deployments whose labels include `selector`."""
    return [
        d["spec"]["template"]
        for d in docs
        if d["kind"] == "Deployment"
        and selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
    ]


def container_ports(template: dict) -> dict:
    """A pod template's ports, by name and by number."""
    ports = {}
    for container in template["spec"]["containers"]:
        for port in container.get("ports", []):
            ports[port["containerPort"]] = port
            if "name" in port:
                ports[port["name"]] = port
    return ports


def check_wiring(docs: list[dict], config: dict) -> None:
    """What no schema sees: that the names and ports the objects give each other meet."""
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    for name, service in services.items():
        matched = pods(docs, service["spec"]["selector"])
        if not matched:
            problem(f"Service {name} selects no pods")
        for port in service["spec"]["ports"]:
            if any(port["targetPort"] not in container_ports(t) for t in matched):
                problem(f"Service {name} sends to port {port['targetPort']}, which its pods lack")
    for ingress in (d for d in docs if d["kind"] == "Ingress"):
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                backend = path["backend"]["service"]
                ports = services.get(backend["name"], {}).get("spec", {}).get("ports", [])
                wanted = backend["port"].get("name", backend["port"].get("number"))
                if not any(wanted in (p.get("name"), p["port"]) for p in ports):
                    problem(f"Ingress path {path['path']} names no port {wanted} of a Service "
                            f"{backend['name']}")
    for policy in (d for d in docs if d["kind"] == "NetworkPolicy"):
        name = policy["metadata"]["name"]
        # The pods a rule's ports must be open on: its own pods for ingress; for egress, the
        # pods it reaches when it names them by label in this namespace.
        own = policy["spec"]["podSelector"]
        rules = [(rule, own) for rule in policy["spec"].get("ingress", [])]
        for rule in policy["spec"].get("egress", []):
            for peer in rule.get("to", []):
                if "podSelector" in peer and "namespaceSelector" not in peer:
                    rules.append((rule, peer["podSelector"]))
        for rule, selector in rules:
            matched = pods(docs, selector.get("matchLabels", {}))
            for port in rule.get("ports", []):
                if any(port["port"] not in container_ports(t) for t in matched):
                    problem(f"NetworkPolicy {name} opens port {port['port']}, on which the "
                            f"pods it names do not listen")
    moat = one(docs, "Deployment", "moat")["spec"]["template"]
    args = next(c for c in moat["spec"]["containers"] if c["name"] == "moat").get("args", [])
    if "--http" in args:
        listen = int(args[args.index("--http") + 1].rsplit(":", 1)[1])
        if listen not in container_ports(moat):
            problem(f"moat serves --http on port {listen}, which is no containerPort")
    redis = config.get("cluster", {}).get("redis")
    if redis:
        host, port = re.search(r"@([^:/]+):(\d+)", redis).groups()
        service = services.get(host)
        if not service or int(port) not in {p["port"] for p in service["spec"]["ports"]}:
            problem(f"[cluster] redis names {host}:{port}, which no Service here offers")


def overlay(path: str) -> None:
    docs = documents(path)
    config = moat_toml(docs)
    check_schema(config)
    check_secrets(docs, config)
    check_grace(docs, config)
    check_wiring(docs, config)
    check_skips(docs)


def same(single_path: str, replicated_path: str) -> None:
    single = moat_toml(documents(single_path))
    replicated = moat_toml(documents(replicated_path))
    if "cluster" in single:
        problem("the single overlay's moat.toml has [cluster]")
    if "cluster" not in replicated:
        problem("the replicated overlay's moat.toml has no [cluster]")
    rest = {k: v for k, v in replicated.items() if k != "cluster"}
    for key in sorted((set(rest) | set(single)) - {"cluster"}):
        if rest.get(key) != single.get(key):
            problem(f"moat.toml [{key}] differs between the overlays (only [cluster] may)")


def canary(path: str, out: str) -> None:
    docs = documents(path)
    pod = one(docs, "Deployment", "moat")["spec"]["template"]["spec"]
    moat = next(c for c in pod["containers"] if c["name"] == "moat")
    moat["securityContxt"] = moat.pop("securityContext")
    with open(out, "w") as file:
        yaml.safe_dump_all(docs, file)


def checkov(path: str, expect: str) -> None:
    report = json.loads(Path(path).read_text())
    reports = report if isinstance(report, list) else [report]
    passed = failed = skipped = resources = 0
    for part in reports:
        summary = part.get("summary", {})
        passed += summary.get("passed", 0)
        failed += summary.get("failed", 0)
        skipped += summary.get("skipped", 0)
        resources += summary.get("resource_count", 0)
        results = part.get("results", {})
        for check in results.get("skipped_checks", []):
            comment = (check.get("check_result") or {}).get("suppress_comment", "")
            print(f"lint: checkov skipped {check['check_id']} on {check['resource']}: {comment}")
        if expect == "clean":
            for check in results.get("failed_checks", []):
                problem(f"checkov {check['check_id']} failed on {check['resource']}: "
                        f"{check['check_name']}")
    print(f"lint: checkov: {resources} resources, {passed} checks passed, {failed} failed, "
          f"{skipped} skipped")
    if expect == "clean" and (passed == 0 or resources == 0):
        problem("checkov checked nothing")
    if expect == "failing" and failed == 0:
        problem("checkov found nothing wrong in a manifest made to be wrong")


def main(argv: list[str]) -> None:
    commands = {"overlay": (overlay, 1), "same": (same, 2), "canary": (canary, 2),
                "checkov": (checkov, 2)}
    if len(argv) < 1 or argv[0] not in commands or len(argv) - 1 != commands[argv[0]][1]:
        sys.exit(__doc__)
    function, _ = commands[argv[0]]
    function(*argv[1:])
    for text in problems:
        print(f"lint: {text}", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
