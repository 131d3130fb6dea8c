"""scripts/bench/post-bodies.lua, the wrk script of scripts/bench-e2e: every answer whose
status its phase does not expect is counted and named, so a refusal phase or a flood that
nginx answered 502 (or the responder 503) cannot pass as a measurement of refusals. Real
wrk against a loopback HTTP server that answers what the test tells it."""

import http.server
import pathlib
import signal
import subprocess
import threading
import time

from deploy_harness import REPO

LUA = REPO / "scripts" / "bench" / "post-bodies.lua"


class StatusByBody(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        status = 502 if b"upstream-down" in body else 429 if b"slow-down" in body else 401
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def run_wrk(url, bodies, done_dir, expected):
    wrk = subprocess.Popen(["wrk", "-t", "1", "-c", "1", "-d", "60s", "--timeout", "5s", "-s", str(LUA), url,
                            "--", str(bodies), "1", "/apple/notifications", str(done_dir), expected],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while not (done_dir / "done.1").exists() and time.monotonic() < deadline and wrk.poll() is None:
        time.sleep(0.05)
    wrk.send_signal(signal.SIGINT)
    output, _ = wrk.communicate(timeout=30)
    line = next(line for line in output.splitlines() if line.startswith("requests="))
    return dict(field.split("=", 1) for field in line.split())


def test_the_wrk_script_counts_and_names_unexpected_statuses(workdir):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StatusByBody)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/apple/notifications"
        bodies = workdir / "bench-bodies.txt"
        lines = ['{"payload":"forged"}'] * 20
        lines[3] = lines[11] = lines[17] = '{"payload":"upstream-down"}'
        lines[8] = '{"payload":"slow-down"}'
        bodies.write_text("\n".join(lines) + "\n")
        for expected, unexpected, statuses in (("401", "4", "429:1,502:3"), ("", "0", "-")):
            done_dir = workdir / f"bench-done-{expected or 'none'}"
            done_dir.mkdir()
            result = run_wrk(url, bodies, done_dir, expected)
            assert result["requests"] == "20", result
            assert result["non_2xx"] == "20", result
            assert (result["unexpected"], result["statuses"]) == (unexpected, statuses), result
    finally:
        server.shutdown()
        server.server_close()


def test_bench_e2e_expects_one_status_per_phase_and_fails_on_any_other():
    script = (REPO / "scripts" / "bench-e2e").read_text()
    for call in ('ceiling=$(run_wrk "$work/bodies/genuine.txt" "$connections" 2 200)',
                 'endpoint=$(run_wrk "$work/bodies/genuine.txt" "$connections" 2 200)',
                 'malformed=$(refusal_cost "$work/bodies/malformed.txt" 400)',
                 'forged=$(refusal_cost "$work/bodies/bad-signature.txt" 401)',
                 '/apple/notifications "" 401 >"$work/flood.out"',
                 'genuine=$(run_wrk "$work/bodies/flood-genuine.txt" 2 1 200)',
                 'for phase in ceiling endpoint malformed forged flood genuine; do'):
        assert call in script, call
    assert script.rstrip().endswith("exit 1\nfi")
