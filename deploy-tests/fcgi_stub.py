"""A tiny FastCGI responder (stdlib only) standing in for the Swift responder.

It speaks just enough of the FastCGI protocol (BEGIN_REQUEST, PARAMS, STDIN in;
STDOUT, END_REQUEST out; GET_VALUES and unknown types answered as the spec
asks) to let nginx pass requests through a real unix socket. It answers like
the real responder does for what these tests send: an unsigned notification is
refused with 400, /healthz, /healthz/live, /healthz/ready and /metrics answer 200; a POST to the
Google location (/google/risc) is answered as RFC 8935 asks of a SET it cannot verify: 400,
{"err": "invalid_request", "description"} with Content-Language. It records the parameters
of every request so tests can check what nginx passed (REQUEST_ID, method).
"""

import json
import os
import socket
import struct
import threading
import time

FCGI_VERSION = 1
BEGIN_REQUEST = 1
ABORT_REQUEST = 2
END_REQUEST = 3
PARAMS = 4
STDIN = 5
STDOUT = 6
GET_VALUES = 9
GET_VALUES_RESULT = 10
UNKNOWN_TYPE = 11

HEADER = struct.Struct("!BBHHBx")


def _record(kind, request_id, content=b""):
    padding = (-len(content)) % 8
    return HEADER.pack(FCGI_VERSION, kind, request_id, len(content), padding) + content + b"\0" * padding


def _read_exact(conn, count):
    data = b""
    while len(data) < count:
        chunk = conn.recv(count - len(data))
        if not chunk:
            raise EOFError("peer closed the FastCGI connection")
        data += chunk
    return data


def _decode_pairs(blob):
    pairs = {}
    index = 0

    def length():
        nonlocal index
        first = blob[index]
        if first < 0x80:
            index += 1
            return first
        value = struct.unpack("!I", blob[index : index + 4])[0] & 0x7FFFFFFF
        index += 4
        return value

    while index < len(blob):
        name_length = length()
        value_length = length()
        name = blob[index : index + name_length].decode("latin-1")
        index += name_length
        pairs[name] = blob[index : index + value_length].decode("latin-1")
        index += value_length
    return pairs


def _encode_pairs(pairs):
    out = b""
    for name, value in pairs.items():
        for item in (name, value):
            size = len(item.encode())
            out += bytes([size]) if size < 0x80 else struct.pack("!I", size | 0x80000000)
        out += name.encode() + value.encode()
    return out


class FastCGIStub:
    """Serves FastCGI on a unix socket from a background thread until stop()."""

    def __init__(self, socket_path, notification_status="400 Bad Request", delay=0.0, google_status=None):
        """notification_status: what a POSTed notification gets (a broken
        responder answering 2xx is one of the faults check-endpoint must catch);
        google_status: the same for a SET posted to the Google location (an empty body);
        delay: seconds to wait before every answer (a slow responder)."""
        self.socket_path = socket_path
        self.notification_status = notification_status
        self.google_status = google_status
        self.delay = delay
        self.requests = []
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(socket_path)
        # nginx's workers may run as another user than the test.
        os.chmod(socket_path, 0o666)
        self._listener.listen(64)
        self._listener.settimeout(0.2)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def stop(self):
        self._stopping.set()
        self._thread.join(timeout=5)
        self._listener.close()

    def seen(self):
        with self._lock:
            return list(self.requests)

    def _serve(self):
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        conn.settimeout(5)
        try:
            with conn:
                self._handle_connection(conn)
        except (EOFError, OSError):
            pass

    def _handle_connection(self, conn):
        params_blob = b""
        body = b""
        request_id = None
        keep_conn = False
        while True:
            version, kind, rid, length, padding = HEADER.unpack(_read_exact(conn, HEADER.size))
            content = _read_exact(conn, length)
            _read_exact(conn, padding)
            if kind == BEGIN_REQUEST:
                request_id = rid
                keep_conn = bool(content[2] & 1)
                params_blob, body = b"", b""
            elif kind == PARAMS:
                params_blob += content
            elif kind == STDIN and length > 0:
                body += content
            elif kind == STDIN:
                self._respond(conn, request_id, _decode_pairs(params_blob), body)
                if not keep_conn:
                    return
            elif kind == ABORT_REQUEST:
                conn.sendall(_record(END_REQUEST, rid, struct.pack("!IB3x", 0, 0)))
            elif kind == GET_VALUES:
                values = {"FCGI_MAX_CONNS": "64", "FCGI_MAX_REQS": "64", "FCGI_MPXS_CONNS": "0"}
                wanted = {name: values[name] for name in _decode_pairs(content) if name in values}
                conn.sendall(_record(GET_VALUES_RESULT, 0, _encode_pairs(wanted)))
            else:
                conn.sendall(_record(UNKNOWN_TYPE, 0, bytes([kind]) + b"\0" * 7))

    def _respond(self, conn, request_id, params, body):
        with self._lock:
            self.requests.append({"params": params, "body_length": len(body)})
        if self.delay:
            # Stands in for a responder that takes this long: the wait is the fault.
            time.sleep(self.delay)
        status, payload = self._answer(params, body)
        if payload.get("error") == "signature_invalid" and self.notification_status != "400 Bad Request":
            status, payload = self.notification_status, {"status": "accepted", "request_id": payload["request_id"]}
        headers = ""
        if "err" in payload:
            # RFC 8935 section 2.3: a SET error names the language of its description.
            headers = "Content-Language: en\r\n"
            if self.google_status is not None:
                status, payload = self.google_status, {}
        # RFC 8935's success is 202 with an empty body.
        text = "" if status.startswith("202") else json.dumps(payload) + "\n"
        response = (
            f"Status: {status}\r\nContent-Type: application/json\r\n{headers}"
            f"Content-Length: {len(text)}\r\n\r\n{text}"
        ).encode()
        conn.sendall(_record(STDOUT, request_id, response) + _record(STDOUT, request_id))
        conn.sendall(_record(END_REQUEST, request_id, struct.pack("!IB3x", 0, 0)))

    @staticmethod
    def _answer(params, body):
        method = params.get("REQUEST_METHOD", "")
        path = params.get("DOCUMENT_URI", "")
        request_id = params.get("REQUEST_ID", "")
        if path == "/apple/notifications" and method == "POST":
            # The stand-in cannot verify signatures, so like the real responder
            # facing an unsigned token it refuses every notification.
            return "400 Bad Request", {"error": "signature_invalid", "request_id": request_id}
        if path == "/google/risc" and method == "POST":
            # Neither can it verify a SET: refused as the responder refuses one with no token.
            return "400 Bad Request", {"err": "invalid_request", "description": "the body is not a SET"}
        if path == "/healthz":
            return "200 OK", {"status": "ok", "request_id": request_id}
        if path in ("/healthz/live", "/healthz/ready"):
            return "200 OK", {"status": path.rsplit("/", 1)[1], "request_id": request_id}
        if path == "/metrics":
            return "200 OK", {"metrics": "stub", "request_id": request_id}
        return "404 Not Found", {"error": "not_found", "request_id": request_id}
