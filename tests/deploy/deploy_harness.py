"""Test harness: a test PKI made with the openssl CLI, and a real nginx running
the shipped site files, rendered into a temp prefix on free loopback ports."""

import os
import pathlib
import pwd
import re
import shutil
import socket
import subprocess
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
NGINX_DIR = REPO / "nginx"
CHECK_ENDPOINT = REPO / "scripts" / "check-endpoint"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
# Debian ships fastcgi_params beside nginx.conf; the site file includes it.
SYSTEM_FASTCGI_PARAMS = pathlib.Path("/etc/nginx/fastcgi_params")

# The placeholders of the shipped files, each replaced exactly as many times as
# it occurs today: if the site file changes shape, rendering fails loudly
# instead of silently testing something else.
SITE_PLACEHOLDERS = {
    "listen 443 ssl default_server;": 1,
    "listen [::]:443 ssl default_server;": 1,
    "listen 80;": 1,
    "listen [::]:80;": 1,
    "ssl_certificate /etc/ssl/siwa-endpoint/fullchain.pem;": 1,
    "ssl_certificate_key /etc/ssl/siwa-endpoint/privkey.pem;": 1,
    "access_log /var/log/nginx/siwa-endpoint.access.log siwa_json;": 2,
    "error_log /var/log/nginx/siwa-endpoint.error.log warn;": 1,
}
UPSTREAM_PLACEHOLDER = "unix:/run/siwa-endpoint/fcgi.sock"


def run(args, **kwargs):
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=60, **kwargs)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def shipped_rate_limit():
    """(rate per second, burst) as shipped, so tests follow tuning of the files."""
    http_conf = (NGINX_DIR / "siwa-endpoint-http.conf").read_text()
    site = (NGINX_DIR / "siwa-endpoint.conf").read_text()
    rate = int(re.search(r"zone=siwa_notifications:\S+ rate=(\d+)r/s;", http_conf).group(1))
    burst = int(re.search(r"limit_req zone=siwa_notifications burst=(\d+) nodelay;", site).group(1))
    return rate, burst


class Pki:
    """A test CA and leaf certificates for localhost / 127.0.0.1."""

    def __init__(self, directory):
        self.dir = pathlib.Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca_key = self.dir / "ca.key"
        self.ca_cert = self.dir / "ca.pem"
        run([
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "365",
            "-keyout", str(self.ca_key), "-out", str(self.ca_cert), "-subj", "/CN=siwa-endpoint test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        ])
        self.extensions = self.dir / "leaf.ext"
        self.extensions.write_text(
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\n"
        )

    def leaf(self, name, key="rsa", digest="sha256", days=90):
        """A valid leaf certificate; key is "rsa" (2048), "rsa1024" (too weak for ATS) or "ec" (P-256);
        digest is the CA's signature hash ("sha1" is too weak for ATS); days its validity from now."""
        key_path, csr = self._key_and_request(name, key)
        cert = self.dir / f"{name}.pem"
        run([
            "openssl", "x509", "-req", "-in", str(csr), "-CA", str(self.ca_cert), "-CAkey", str(self.ca_key),
            "-CAcreateserial", "-days", str(days), f"-{digest}", "-extfile", str(self.extensions), "-out", str(cert),
        ])
        return cert, key_path

    def expired_leaf(self, name):
        """A leaf whose validity ended in the past. OpenSSL 3.0's `x509 -req` has
        no start/end date options, but `openssl ca` takes -startdate/-enddate."""
        key_path, csr = self._key_and_request(name, "rsa")
        database = self.dir / "ca-db"
        database.mkdir(exist_ok=True)
        (database / "index.txt").write_text("")
        (database / "serial").write_text("1000\n")
        config = self.dir / "ca.cnf"
        config.write_text(
            "[ca]\ndefault_ca = test_ca\n"
            "[test_ca]\n"
            f"database = {database}/index.txt\n"
            f"new_certs_dir = {database}\n"
            f"serial = {database}/serial\n"
            "default_md = sha256\npolicy = any_name\nunique_subject = no\ncopy_extensions = none\n"
            "[any_name]\ncommonName = supplied\n"
        )
        cert = self.dir / f"{name}.pem"
        run([
            "openssl", "ca", "-batch", "-notext", "-config", str(config), "-cert", str(self.ca_cert),
            "-keyfile", str(self.ca_key), "-in", str(csr), "-out", str(cert),
            "-startdate", "20200101000000Z", "-enddate", "20200201000000Z", "-extfile", str(self.extensions),
        ])
        return cert, key_path

    def _key_and_request(self, name, key):
        key_path = self.dir / f"{name}.key"
        csr = self.dir / f"{name}.csr"
        algorithm = {
            "rsa": ["-newkey", "rsa:2048"],
            "rsa1024": ["-newkey", "rsa:1024"],
            "ec": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"],
        }[key]
        run(["openssl", "req", "-new", *algorithm, "-nodes", "-keyout", str(key_path), "-out", str(csr),
             "-subj", "/CN=localhost"])
        return key_path, csr


def render_site(cert, key, https_port, http_port, log_dir):
    text = (NGINX_DIR / "siwa-endpoint.conf").read_text()
    for placeholder, expected in SITE_PLACEHOLDERS.items():
        found = text.count(placeholder)
        assert found == expected, f"site file: {placeholder!r} occurs {found} times, expected {expected}"
    replacements = {
        "listen 443 ssl default_server;": f"listen 127.0.0.1:{https_port} ssl default_server;",
        "listen [::]:443 ssl default_server;": f"listen [::1]:{https_port} ssl default_server;",
        "listen 80;": f"listen 127.0.0.1:{http_port};",
        "listen [::]:80;": f"listen [::1]:{http_port};",
        "ssl_certificate /etc/ssl/siwa-endpoint/fullchain.pem;": f"ssl_certificate {cert};",
        "ssl_certificate_key /etc/ssl/siwa-endpoint/privkey.pem;": f"ssl_certificate_key {key};",
        "access_log /var/log/nginx/siwa-endpoint.access.log siwa_json;":
            f"access_log {log_dir / 'access.log'} siwa_json;",
        "error_log /var/log/nginx/siwa-endpoint.error.log warn;": f"error_log {log_dir / 'error.log'} warn;",
    }
    for placeholder, value in replacements.items():
        text = text.replace(placeholder, value)
    return text


class NginxStack:
    """The shipped nginx files running in a temp prefix, plus (optionally) the
    FastCGI stand-in on the upstream socket. `site_edit` lets a test derive a
    deliberately broken variant from the shipped site file."""

    def __init__(self, prefix, cert, key, site_edit=None, with_backend=True, backend_options=None):
        from fcgi_stub import FastCGIStub

        self.prefix = pathlib.Path(prefix)
        self.conf_dir = self.prefix / "conf"
        self.log_dir = self.prefix / "logs"
        for folder in (self.conf_dir, self.log_dir, self.prefix / "temp"):
            folder.mkdir(parents=True, exist_ok=True)
        # nginx's workers must reach the socket and logs inside this prefix.
        os.chmod(self.prefix, 0o755)
        self.https_port = free_port()
        self.http_port = free_port()
        self.socket_path = self.prefix / "fcgi.sock"
        self.backend = FastCGIStub(str(self.socket_path), **(backend_options or {})) if with_backend else None

        site = render_site(cert, key, self.https_port, self.http_port, self.log_dir)
        if site_edit is not None:
            edited = site_edit(site)
            assert edited != site, "site_edit changed nothing"
            site = edited
        (self.conf_dir / "siwa-endpoint.conf").write_text(site)
        (self.conf_dir / "siwa-endpoint-http.conf").write_text((NGINX_DIR / "siwa-endpoint-http.conf").read_text())
        upstream = (NGINX_DIR / "siwa-endpoint-upstream.conf").read_text()
        assert upstream.count(UPSTREAM_PLACEHOLDER) == 1
        (self.conf_dir / "siwa-endpoint-upstream.conf").write_text(
            upstream.replace(UPSTREAM_PLACEHOLDER, f"unix:{self.socket_path}"))
        shutil.copy(SYSTEM_FASTCGI_PARAMS, self.conf_dir / "fastcgi_params")
        self.main_conf = self.conf_dir / "nginx.conf"
        self.main_conf.write_text(self._main_conf())
        self.process = None

    def _main_conf(self):
        temp = self.prefix / "temp"
        user = f"user {pwd.getpwuid(os.geteuid()).pw_name};\n" if os.geteuid() == 0 else ""
        # Mirrors Debian's nginx.conf where it matters: http-context file first
        # (conf.d), then the site (sites-enabled), and the Debian default of
        # TLSv1/TLSv1.1 enabled in http, which the site must override.
        return (
            f"{user}worker_processes 1;\n"
            "daemon off;\n"
            f"pid {self.prefix}/nginx.pid;\n"
            f"error_log {self.log_dir}/main-error.log warn;\n"
            "events { worker_connections 256; }\n"
            "http {\n"
            "    ssl_protocols TLSv1 TLSv1.1 TLSv1.2 TLSv1.3;\n"
            f"    access_log {self.log_dir}/main-access.log;\n"
            f"    client_body_temp_path {temp}/body;\n"
            f"    fastcgi_temp_path {temp}/fastcgi;\n"
            f"    proxy_temp_path {temp}/proxy;\n"
            f"    uwsgi_temp_path {temp}/uwsgi;\n"
            f"    scgi_temp_path {temp}/scgi;\n"
            "    include siwa-endpoint-http.conf;\n"
            "    include siwa-endpoint.conf;\n"
            "}\n"
        )

    def nginx_args(self, *extra):
        return [NGINX, "-p", str(self.prefix), "-c", str(self.main_conf), *extra]

    def test_config(self):
        return subprocess.run(self.nginx_args("-t"), capture_output=True, text=True, timeout=30)

    def start(self):
        checked = self.test_config()
        assert checked.returncode == 0, f"nginx -t failed:\n{checked.stderr}"
        self.process = subprocess.Popen(self.nginx_args(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited: {self.process.stderr.read().decode()}")
            try:
                socket.create_connection(("127.0.0.1", self.https_port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("nginx did not start listening within 10 s")

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if self.process is not None and self.process.stderr:
            self.process.stderr.close()
        if self.backend is not None:
            self.backend.stop()

    def access_log(self):
        import json

        path = self.log_dir / "access.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    @property
    def url(self):
        return f"https://localhost:{self.https_port}/apple/notifications"
