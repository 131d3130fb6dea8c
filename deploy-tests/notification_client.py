"""Posts signed notification bodies to https://localhost/apple/notifications, the way
Apple would (one connection per notification), from several threads; run by the
package tests inside the booted container's network namespace.

    notification_client.py CA_FILE THREADS RATE [STOP_FILE] < bodies (one per line)

At most RATE notifications start each second, all threads together: the shipped site
answers 429 above 50 a second from one address (burst 100), as it should.

Prints one JSON line per body, in input order: {"index", "status", "outcome"}; status 0
means no answer (the connection failed). With STOP_FILE, it stops taking new bodies as
soon as that file exists (bodies not posted are printed with status null) and the last
line is {"stopped": true}; it always stops when the bodies run out."""

import http.client
import json
import os
import ssl
import sys
import threading
import time


def post(context, body):
    connection = http.client.HTTPSConnection("localhost", 443, context=context, timeout=30)
    try:
        connection.request("POST", "/apple/notifications", body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        payload = response.read()
        try:
            outcome = json.loads(payload).get("status")
        except ValueError:
            outcome = None
        return response.status, outcome
    except OSError as error:
        return 0, type(error).__name__
    finally:
        connection.close()


def main():
    ca_file, threads, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    stop_file = sys.argv[4] if len(sys.argv) > 4 else None
    bodies = [line.strip().encode() for line in sys.stdin if line.strip()]
    context = ssl.create_default_context(cafile=ca_file)
    results = [None] * len(bodies)
    next_index = iter(range(len(bodies)))
    lock = threading.Lock()
    stopped = threading.Event()
    pacing = {"next": time.monotonic()}

    def worker():
        while not stopped.is_set():
            if stop_file and os.path.exists(stop_file):
                stopped.set()
                return
            with lock:
                index = next(next_index, None)
                start_at = pacing["next"]
                pacing["next"] = max(start_at, time.monotonic()) + 1 / rate
            if index is None:
                return
            delay = start_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            results[index] = post(context, bodies[index])

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    for index, result in enumerate(results):
        status, outcome = result if result else (None, None)
        print(json.dumps({"index": index, "status": status, "outcome": outcome}))
    print(json.dumps({"stopped": stopped.is_set()}))


if __name__ == "__main__":
    main()
