"""tests/lmcache/index_unreachable.py — is the package index unreachable?

Exit 0 and print why when PyPI (or the index pip is configured with:
PIP_INDEX_URL, else `pip config`) cannot be reached; exit 1 when it can. The
scripts ask only after pip failed, so that a reachable index with a failing
install is a failure, not a skip (setup_env.sh, server_test.sh)."""
import os
import subprocess
import sys
import urllib.request

url = os.environ.get("PIP_INDEX_URL", "")
if not url:
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        k, _, v = line.partition("=")
        if k.strip().endswith("index-url"):
            url = v.strip().strip("'\"")
url = (url or "https://pypi.org/simple").rstrip("/") + "/lmcache/"
try:
    urllib.request.urlopen(url, timeout=10).read(1)
except Exception as e:  # any failure to reach it
    print(f"{url}: {e}")
    sys.exit(0)
sys.exit(1)
