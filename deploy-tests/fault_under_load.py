"""The fault-under-load harness the deploy tests share: signed notifications posted at a
steady pace from several threads, a fault (the caller's callable: a rollout, a node
killed and restarted) started once enough answers are in, every non-200 retried as Apple
would, and what came back handed to the test to check the contract."""

import threading
import time

from deploy_harness import wait_until


class PacedLoad:
    """`post(body)` for each of `bodies` in turn from `threads` threads, each thread one post
    every `interval` seconds. A thread stops early once the fault has ended, it has had
    `after` answers since, and at least `minimum` notifications were sent in all (by
    default every body is sent). An exception from `post` is an error, kept in `errors`."""

    def __init__(self, post, bodies, threads, interval, minimum=None, after=0):
        self.post = post
        self.bodies = bodies
        self.threads = threads
        self.interval = interval
        self.minimum = len(bodies) if minimum is None else minimum
        self.after = after
        self.answers = [None] * len(bodies)
        self.answered_at = [None] * len(bodies)
        self.errors = []
        self.sent = []  # the indexes posted: the threads take them in turn
        self.fault_started = self.fault_finished = None
        self._lock = threading.Lock()
        self._fault_done = threading.Event()

    def answered(self):
        """How many notifications have been answered so far."""
        return sum(moment is not None for moment in self.answered_at)

    def _client(self, offset):
        start = time.monotonic()
        answered_after = 0
        for number, index in enumerate(range(offset, len(self.bodies), self.threads)):
            with self._lock:
                if self._fault_done.is_set() and answered_after >= self.after and len(self.sent) >= self.minimum:
                    return
                self.sent.append(index)
            delay = start + number * self.interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # pacing: a steady stream, not a wait for an event
            try:
                self.answers[index] = self.post(self.bodies[index])
                self.answered_at[index] = time.monotonic()
            except Exception as error:  # a dropped connection is a failure too
                self.errors.append(f"{index}: {error!r}")
            if self._fault_done.is_set():
                answered_after += 1

    def run(self, fault, fault_after, fault_wait=60, join_timeout=120):
        """Starts the load; once `fault_after` notifications are answered (a failure before
        that ends the wait at once and is reported), calls `fault(self)`; waits up to
        `join_timeout` seconds for the threads. Returns what `fault` returned."""
        workers = [threading.Thread(target=self._client, args=(offset,)) for offset in range(self.threads)]
        for worker in workers:
            worker.start()
        try:
            wait_until(lambda: self.errors or self.answered() >= fault_after, fault_wait)
            assert self.answered() >= fault_after, self.errors[:5]
            self.fault_started = time.monotonic()
            result = fault(self)
            self.fault_finished = time.monotonic()
        finally:
            self._fault_done.set()
            for worker in workers:
                worker.join(timeout=join_timeout)
        assert not any(worker.is_alive() for worker in workers)
        return result

    def retry_non_200(self, rounds):
        """Apple retries any non-200: `rounds` more tries of each, each after the previous
        answer. Returns the indexes that were not 200 at first."""
        first_non_200 = self.not_200()
        for _ in range(rounds):
            for index in self.not_200():
                self.answers[index] = self.post(self.bodies[index])
        return first_non_200

    def not_200(self):
        """The indexes sent and not answered 200."""
        return [index for index in sorted(self.sent) if self.answers[index] is None or self.answers[index][0] != 200]
