"""A Debian booted with systemd as its PID 1, in a container: systemd-nspawn on an
overlay of a cached root file system, so every run starts from the same clean Debian
and the cache itself is never changed.

The cached root (debootstrap --variant=minbase, plus nginx, redis-server, curl and the
runtime libraries the package depends on) is built once, in about a minute and a half
from Debian's archive, under $XDG_CACHE_HOME/siwa-endpoint-systemd/<suite> (default
~/.cache), and built again when missing. The container runs with --private-network:
nothing in it reaches the network, and the host reaches its loopback only by entering
its network namespace (`host_in_network`). No Swift inside: the package must do."""

import contextlib
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

# What the booted system needs besides the package itself: the web server and Redis the
# package recommends, the runtime libraries of its Depends (preinstalled because the
# container has no network when the package is installed), and curl.
PACKAGES = {
    "bookworm": ["nginx", "redis-server", "libfcgi0ldbl", "libhiredis0.14", "libssl3", "libcurl4", "libc-ares2", "curl",
                 "procps"],
    "trixie": ["nginx", "redis-server", "libfcgi0t64", "libhiredis1.1.0", "libssl3t64", "libcurl4t64", "libc-ares2",
               "curl", "procps"],
}
INCLUDE = "systemd,systemd-sysv,dbus,ca-certificates"
MIRROR = os.environ.get("SIWA_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(base) / "siwa-endpoint-systemd"


def cached_root(suite="bookworm"):
    """The cached root file system of `suite`, built when missing (under a temporary name,
    renamed into place once complete, so a failed build is never taken for a cache)."""
    root = cache_dir() / suite
    # Beside the root: the package list it was made with; another list makes it again.
    stamp = cache_dir() / f"{suite}.packages"
    wanted = " ".join(PACKAGES[suite]) + "\n"
    if (root / "usr" / "sbin" / "nginx").exists() and stamp.exists() and stamp.read_text() == wanted:
        return root
    building = cache_dir() / f"{suite}.building"
    shutil.rmtree(building, ignore_errors=True)
    building.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["debootstrap", "--variant=minbase", f"--include={INCLUDE}", suite, str(building), MIRROR],
                   check=True, capture_output=True, timeout=900)
    subprocess.run(["systemd-nspawn", "-D", str(building), "--register=no", "--keep-unit", "--pipe", "sh", "-c",
                    "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                    "--no-install-recommends " + " ".join(PACKAGES[suite]) + " >/dev/null && apt-get clean"],
                   check=True, capture_output=True, timeout=900)
    shutil.rmtree(root, ignore_errors=True)
    building.rename(root)
    stamp.write_text(wanted)
    return root


class BootedDebian:
    """One container: `boot()`, `run(...)` inside it, `reboot()`, `poweroff()`. Always
    `close()` it (the fixture does, failures included): it powers off, kills what is
    left, unmounts the overlay and deletes its directory."""

    def __init__(self, suite="bookworm"):
        self.lower = cached_root(suite)
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="siwa-systemd-"))
        self.upper = self.dir / "upper"
        self.work = self.dir / "work"
        self.root = self.dir / "root"
        for directory in (self.upper, self.work, self.root):
            directory.mkdir()
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={self.lower},upperdir={self.upper},workdir={self.work}", str(self.root)],
                       check=True, capture_output=True, timeout=30)
        self.mounted = True
        self.nspawn = None
        self.pid = None
        self.console = self.dir / "console.log"

    # ---- Lifecycle ---------------------------------------------------------------------
    def boot(self, timeout=120):
        """Starts the container and waits until its systemd says the system is running."""
        with open(self.console, "ab") as console:
            self.nspawn = subprocess.Popen(
                ["systemd-nspawn", "-D", str(self.root), "-b", "--register=no", "--keep-unit",
                 "--private-network", "--machine", "siwa-systemd-test"],
                stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while self.pid is None:
            assert self.nspawn.poll() is None, f"systemd-nspawn exited: {self.console.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "the container's systemd did not appear"
            self.pid = self._container_systemd()
            if self.pid is None:
                time.sleep(0.1)
        # Until its bus answers, systemctl inside prints nothing or "offline" and returns at once.
        while True:
            remaining = max(1, int(deadline - time.monotonic()))
            state = self.run(["systemctl", "is-system-running", "--wait"], check=False, timeout=remaining)
            if state.stdout.strip() not in ("", "offline") or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        assert state.stdout.strip() == "running", (
            f"the container's system is {state.stdout.strip()} {state.stderr.strip()}: "
            + self.run(["systemctl", "--failed", "--no-legend"], check=False).stdout)
        return self

    def _container_systemd(self):
        children = pathlib.Path(f"/proc/{self.nspawn.pid}/task/{self.nspawn.pid}/children")
        with contextlib.suppress(OSError):
            for child in children.read_text().split():
                if pathlib.Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                    return int(child)
        return None

    def _wait_nspawn_exit(self, timeout):
        try:
            return self.nspawn.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def reboot(self, timeout=120):
        """`systemctl reboot` inside; systemd-nspawn exits with status 133 on a reboot (its
        own unit restarts it), so the same root is booted again here."""
        self.run(["systemctl", "reboot"], check=False)
        status = self._wait_nspawn_exit(60)
        assert status == 133, f"systemd-nspawn exited with {status} after a reboot"
        self.pid = None
        return self.boot(timeout)

    def poweroff(self, timeout=60):
        if self.nspawn is None or self.nspawn.poll() is not None:
            return self.nspawn.returncode if self.nspawn else None
        self.run(["systemctl", "poweroff"], check=False)
        return self._wait_nspawn_exit(timeout)

    def close(self):
        with contextlib.suppress(Exception):
            self.poweroff()
        if self.nspawn is not None and self.nspawn.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.nspawn.pid, 9)
            self.nspawn.wait(timeout=30)
        if self.mounted:
            for _ in range(50):
                if subprocess.run(["umount", str(self.root)], capture_output=True).returncode == 0:
                    break
                time.sleep(0.2)
            else:
                subprocess.run(["umount", "--lazy", str(self.root)], capture_output=True)
            self.mounted = False
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- Commands ------------------------------------------------------------------------
    def run(self, argv, check=True, timeout=60, input=None):
        """Runs argv inside the container (every namespace of its PID 1)."""
        result = subprocess.run(["nsenter", "-t", str(self.pid), "-a", *argv], capture_output=True, text=True,
                                timeout=timeout, input=input)
        if check:
            assert result.returncode == 0, (
                f"{' '.join(argv)} exited {result.returncode}: {result.stdout[-3000:]}{result.stderr[-3000:]}")
        return result

    def sh(self, script, check=True, timeout=60, input=None):
        return self.run(["sh", "-c", script], check=check, timeout=timeout, input=input)

    def put(self, path, data, mode="0644", owner="root:root"):
        """Writes a file inside the container (text or bytes)."""
        if isinstance(data, bytes):
            data = data.decode()
        self.run(["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat >"$1" && chmod "$2" "$1" && chown "$3" "$1"',
                  "sh", path, mode, owner], input=data)

    def put_file(self, path, host_path, mode="0644"):
        """Copies a host file in (binary safe, through the overlay's upper layer)."""
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(host_path, target)
        os.chmod(target, int(mode, 8))

    def host_in_network(self, argv, timeout=300, input=None):
        """Runs a host program inside the container's network namespace only: it sees the
        container's loopback (nginx on 443) and the host's files."""
        return subprocess.run(["nsenter", "-t", str(self.pid), "-n", *argv], capture_output=True, text=True,
                              timeout=timeout, input=input)

    def property(self, unit, name):
        return self.run(["systemctl", "show", unit, "-P", name]).stdout.strip()

    def wait_for(self, condition, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.2)
        assert condition(), f"not within {timeout}s: {what}"
