"""The slowest tests of ``make test``'s two pytest runs, printed together.

Each run appends one JSON line per test phase (setup, call, teardown) to the file named by
``LDABEAM_TEST_DURATIONS`` (conftest.py's ``pytest_runtest_logreport``; with xdist, the
controller writes the reports of every worker). ``python tests/helpers/durations.py FILE N``
prints the N longest phases as pytest's ``--durations=N`` does, and the total.
"""
import json
import sys

ENV = "LDABEAM_TEST_DURATIONS"


def record(path, report):
    with open(path, "a") as f:
        f.write(json.dumps({"nodeid": report.nodeid, "when": report.when,
                            "duration": report.duration}) + "\n")


def main(argv):
    path, n = argv[0], int(argv[1]) if len(argv) > 1 else 30
    try:
        with open(path) as f:
            rows = [json.loads(l) for l in f if l.strip()]
    except OSError:
        print("no durations recorded (%s)" % path)
        return 0
    rows.sort(key=lambda r: -r["duration"])
    print("=" * 29 + " slowest %d durations " % n + "=" * 29)
    for r in rows[:n]:
        print("%.2fs %-8s %s" % (r["duration"], r["when"], r["nodeid"]))
    print("(%d test phases, %.0f s in all, over both runs)"
          % (len(rows), sum(r["duration"] for r in rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
