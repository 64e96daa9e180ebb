"""Run a function in several threads at once and collect what they raised."""

import threading


def run_in_threads(work, n: int) -> list:
    """work(i) for i in range(n), each in its own thread, all started before any is
    joined; returns [(i, exception)] for the threads that raised."""
    errors = []

    def guarded(i):
        try:
            work(i)
        except Exception as exc:  # reported to the caller, with the thread's number
            errors.append((i, exc))

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
