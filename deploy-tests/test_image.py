"""The OCI images scripts/image builds from the Debian package (SIWA_PACKAGE_DEB, the
package scripts/package made): unpacked with `umoci unpack`, read (the configured user,
no shell, every shared library inside the root), then RUN the way a pod runs them: the
responder image's root and the nginx image's root, each under systemd-nspawn with a
read-only root file system, as the image's user, with the image's entrypoint and
environment, the spool, the JWKS cache and the socket directory on bind-mounted
directories standing in for volumes (the socket directory shared by both, as an emptyDir
is in the pod). A real redis-server on the host's loopback; nginx (the shipped site,
from the nginx image) in a private network namespace, reached by entering it. Apple
itself cannot be reached from a test: the test kit's key signs the notification and a
plain HTTP server on loopback (which SIWA_JWKS_URL allows for loopback only) serves its
JWKS, standing in for https://appleid.apple.com/auth/keys.

systemd-nspawn's --user looks the user up with getent inside the root, and makes the
user's home directory: the test adds an empty /usr/bin/getent (the host's is bound onto
it, read-only) and /nonexistent to its unpacked copy. The images hold neither."""

import contextlib
import functools
import http.server
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import threading

from deploy_harness import Pki, RedisServer, wait_until
from oci_images import image_configuration, image_reference, run

CLIENT_ID = "com.example.app"
KEY_ID = "image-test-key"
SHELLS = {"sh", "bash", "dash", "busybox", "ash", "zsh", "ksh", "rbash"}


def test_each_image_runs_as_its_fixed_non_root_user_with_no_shell(images):
    _, responder, nginx = images
    assert (responder.uid, responder.gid) == (10001, 10001)
    # nginx's group is the responder's: the FastCGI socket is 0660 in that group.
    assert (nginx.uid, nginx.gid) == (10002, 10001)
    assert responder.process["args"] == ["/usr/bin/siwa-endpoint", "serve"]
    assert nginx.process["args"] == ["/usr/sbin/nginx", "-e", "stderr", "-g", "daemon off;"]
    assert responder.passwd()["10001"][0] == "siwa-endpoint"
    assert nginx.passwd()["10002"][0] == "siwa-endpoint-nginx"
    for image in (responder, nginx):
        entry = image.passwd()[str(image.uid)]
        assert entry[6] == "/usr/sbin/nologin"
        names = {path.name for path in image.files()}
        assert not names & SHELLS, names & SHELLS
        # No package manager, no user switching, nothing of a distribution but libraries.
        assert not names & {"apt", "apt-get", "dpkg", "su", "sudo", "getent", "env", "ls", "ld.so.cache"}
        assert not (image.root / "bin/sh").exists() and not os.path.lexists(image.root / "usr/bin/sh")
        assert image.passwd()[str(image.uid)][3] == str(image.gid)


def test_the_responder_image_takes_its_paths_from_the_environment_onto_its_volumes(images):
    _, responder, _ = images
    environment = responder.environment
    assert {key: environment[key] for key in ("SIWA_FCGI_SOCKET", "SIWA_SPOOL_DIR", "SIWA_JWKS_CACHE")} == {
        "SIWA_FCGI_SOCKET": "/run/siwa-endpoint/fcgi.sock",
        "SIWA_SPOOL_DIR": "/var/lib/siwa-endpoint/spool",
        "SIWA_JWKS_CACHE": "/var/cache/siwa-endpoint/jwks.json"}
    volumes = sorted(mount["destination"] for mount in responder.config["mounts"]
                     if mount["destination"].startswith(("/var", "/run/siwa")))
    # Not the spool: a runtime would give it a volume of the container's own wherever no mount
    # covers exactly that path (under Kubernetes the claim is mounted at its parent).
    assert volumes == ["/run/siwa-endpoint", "/var/cache/siwa-endpoint"]


def test_each_image_stops_its_program_gracefully(images):
    """The signal a runtime sends at stop (the kubelet's, after preStop): SIGTERM makes serve
    finish what is in flight; nginx takes SIGTERM as a fast shutdown that drops the requests
    in flight, SIGQUIT as the graceful one that finishes them."""
    workdir, _, _ = images
    signals = {name: image_configuration(image_reference(workdir, name)).get("StopSignal")
               for name in ("siwa-endpoint", "siwa-endpoint-nginx")}
    assert signals == {"siwa-endpoint": "SIGTERM", "siwa-endpoint-nginx": "SIGQUIT"}


def test_every_shared_library_resolves_inside_the_root(images):
    _, responder, nginx = images
    for image, binary in ((responder, "/usr/bin/siwa-endpoint"), (nginx, "/usr/sbin/nginx")):
        listed = image.library_resolution(binary)
        assert listed.returncode == 0, listed.stderr
        assert "not found" not in listed.stdout
        resolved = re.findall(r"=> (/\S+)", listed.stdout)
        assert len(resolved) >= 5
        for path in resolved:
            assert os.path.lexists(image.root / path.lstrip("/")), path
        assert "libssl.so.3" in listed.stdout


class JWKSServer:
    """The test kit's JWKS over plain HTTP on loopback: the stand-in for Apple's keys."""

    def __init__(self, directory):
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
        handler.log_message = lambda *args: None
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}/test-jwks.json"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def volume(path, uid, mode=0o700, gid=None):
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, uid if gid is None else gid)
    path.chmod(mode)
    return path


def nspawn(image, name, binds, environment, log, private_network=False):
    """The image's process as its configuration says (user, entrypoint and command,
    environment), its root read-only, under systemd-nspawn."""
    args = ["systemd-nspawn", "-D", str(image.root), "--register=no", "--keep-unit", "--read-only", "--as-pid2",
            "--quiet", "--timezone=off", "--resolv-conf=off", f"--machine={name}", "--bind-ro=/usr/bin/getent",
            f"--user={image.uid}"]
    if private_network:
        args.append("--private-network")
    args += [f"--bind{'-ro' if read_only else ''}={source}:{target}" for source, target, read_only in binds]
    for key, value in {**image.environment, **environment}.items():
        args.append(f"--setenv={key}={value}")
    args += image.process["args"]
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def container_pid(process, command):
    """The pid of `command` (by its name) among the container's processes."""
    pending = [process.pid]
    for _ in range(64):
        if not pending:
            return None
        pid = pending.pop()
        with contextlib.suppress(OSError):
            if pathlib.Path(f"/proc/{pid}/comm").read_text().strip() == command:
                return pid
            for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
    return None


def stop(process):
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def test_the_images_serve_a_signed_notification_into_redis_and_spool_it_while_redis_is_down(images):
    workdir, responder, nginx = images
    responder.prepare_for_nspawn()
    nginx.prepare_for_nspawn()
    binary = responder.root / "usr/bin/siwa-endpoint"
    kit = workdir / "kit"
    run([str(binary), "keygen", "--out", str(kit), "--kid", KEY_ID])
    pki = Pki(workdir / "pki")
    certificates = volume(workdir / "certificates", nginx.uid, 0o755)
    for (certificate, key), prefix in ((pki.leaf("localhost"), ""), (pki.leaf("image-ecdsa", key="ec"), "ecdsa-")):
        shutil.copyfile(certificate, certificates / f"{prefix}fullchain.pem")
        shutil.copyfile(key, certificates / f"{prefix}privkey.pem")
    for file in certificates.iterdir():
        os.chown(file, nginx.uid, nginx.gid)
        file.chmod(0o600 if "privkey" in file.name else 0o644)
    spool = volume(workdir / "volumes/spool", responder.uid)
    cache = volume(workdir / "volumes/cache", responder.uid)
    sockets = volume(workdir / "volumes/sockets", responder.uid, 0o755)
    redis = RedisServer(workdir / "redis")
    jwks = JWKSServer(kit)
    processes = []
    try:
        serve_log = open(workdir / "serve.log", "w")
        serve = nspawn(responder, "siwa-image-serve",
                       [(spool, "/var/lib/siwa-endpoint/spool", False), (cache, "/var/cache/siwa-endpoint", False),
                        (sockets, "/run/siwa-endpoint", False)],
                       {"SIWA_CLIENT_IDS": CLIENT_ID, "SIWA_REDIS_URL": redis.url, "SIWA_JWKS_URL": jwks.url,
                        "SIWA_REDIS_TIMEOUT_MS": "500"}, serve_log)
        processes.append(serve)
        socket_path = sockets / "fcgi.sock"
        assert wait_until(lambda: socket_path.is_socket() or serve.poll() is not None, timeout=30), \
            (workdir / "serve.log").read_text()
        assert serve.poll() is None, (workdir / "serve.log").read_text()
        stat = socket_path.stat()
        assert (stat.st_uid, stat.st_gid, oct(stat.st_mode & 0o777)) == (responder.uid, responder.gid, "0o660")
        # Written where the image's environment points: the JWKS cache on its volume.
        assert wait_until(lambda: (cache / "jwks.json").exists(), timeout=30), (workdir / "serve.log").read_text()
        assert (cache / "jwks.json").stat().st_uid == responder.uid

        # The responder's own root is read-only and it is not root.
        serve_pid = container_pid(serve, "siwa-endpoint")
        assert serve_pid is not None
        status = pathlib.Path(f"/proc/{serve_pid}/status").read_text()
        assert re.search(r"^Uid:\s+10001\s+10001\s+10001\s+10001$", status, re.M)
        root_mount = [line.split() for line in pathlib.Path(f"/proc/{serve_pid}/mountinfo").read_text().splitlines()
                      if line.split()[4] == "/"]
        assert root_mount and "ro" in root_mount[-1][5].split(","), root_mount

        volume(workdir / "volumes/nginx-lib", nginx.uid, gid=nginx.gid)
        volume(workdir / "volumes/nginx-run", nginx.uid, 0o755, gid=nginx.gid)
        nginx_log = open(workdir / "nginx.log", "w")
        server = nspawn(nginx, "siwa-image-nginx",
                        [(workdir / "volumes/nginx-lib", "/var/lib/nginx", False),
                         (workdir / "volumes/nginx-run", "/run/nginx", False),
                         (certificates, "/etc/ssl/siwa-endpoint", True), (sockets, "/run/siwa-endpoint", False)],
                        {}, nginx_log, private_network=True)
        processes.append(server)

        def nginx_pid():
            return container_pid(server, "nginx")

        def post(path, body=None):
            """curl inside nginx's network namespace: (status, body)."""
            args = ["nsenter", "-t", str(nginx_pid()), "-n", "curl", "-sS", "--max-time", "10", "--cacert",
                    str(pki.ca_cert), "--resolve", "localhost:8443:127.0.0.1", "-o", "-", "-w", "\n%{http_code}",
                    f"https://localhost:8443{path}"]
            if body is not None:
                args += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
            result = subprocess.run(args, input=body, capture_output=True, text=True, timeout=30)
            text, _, code = result.stdout.rpartition("\n")
            return int(code or 0), text

        assert wait_until(lambda: server.poll() is not None or (nginx_pid() is not None and post("/healthz")[0] == 200),
                          timeout=30), (workdir / "nginx.log").read_text() + (workdir / "serve.log").read_text()
        assert server.poll() is None, (workdir / "nginx.log").read_text()

        def signed(sub):
            return run([str(binary), "sign", "--key", str(kit / "test-signing-key.pem"), "--kid", KEY_ID, "--type",
                        "consent-revoked", "--sub", sub, "--client-id", CLIENT_ID]).stdout.strip()

        status, text = post("/apple/notifications", signed("image-user-1"))
        assert (status, json.loads(text)["status"]) == (200, "applied"), text
        assert redis.hgetall(f"siwa:user:{{{CLIENT_ID}:image-user-1}}").get("consent_revoked_at")

        # Redis down: answered 200 and kept on the spool's volume.
        redis.stop()
        status, text = post("/apple/notifications", signed("image-user-2"))
        assert (status, json.loads(text)["status"]) == (200, "spooled"), text
        segments = list(spool.glob("segment-*.log"))
        assert segments and any("image-user-2" in segment.read_text() for segment in segments)
    finally:
        for process in reversed(processes):
            stop(process)
        jwks.stop()
        redis.stop()
