"""tests/python/conftest.py — every skipped test says why in make test's log.

pytest captures what a test prints, and -q shows no skip reasons, so a
fixture's "SKIP: ..." print (or a pytest.skip) would not reach the log the
Makefile's summary reads (build/python.log). This hook prints one
``SKIP: python: <test>: <reason>`` line per skipped test at the end of the
run, the form the summary repeats.
"""


def pytest_terminal_summary(terminalreporter):
    for rep in terminalreporter.stats.get("skipped", []):
        reason = ""
        if isinstance(rep.longrepr, tuple) and len(rep.longrepr) == 3:
            reason = str(rep.longrepr[2])
        elif rep.longrepr is not None:
            reason = str(rep.longrepr)
        if reason.startswith("Skipped: "):
            reason = reason[len("Skipped: "):]
        name = rep.nodeid.split("::")[-1]
        terminalreporter.write_line(f"SKIP: python: {name}: {reason}")
