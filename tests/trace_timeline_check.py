#!/usr/bin/env python3
"""tests/trace_timeline_check.py — the trace file as a timeline (ctest
demo_trace_timeline; docs/exporters.md, "The trace file").

Runs `cbt demo --cpu --plant-queue` (or checks a given file) and parses its
trace file against the trace-event format that Perfetto and chrome://tracing
load:

  - the file is one JSON object with a traceEvents list; every event has
    ph, ts, pid and tid, and a known phase;
  - every stream-timed span (a slice with cbt.stream in its args) is on a
    lane of its own stream: one lane per (device, stream) for its operations
    and one for its kernels, each named by a thread_name metadata event
    ("stream <n>", "stream <n> kernels") in a process named for the device
    ("CPU streams", "GPU <d>"), and no two streams share a lane;
  - host spans stay in process 1 ("cbt requests");
  - flows pair: every "s" has exactly one "f" with the same id, name and
    cat, later or at the same time; the "f" binds to its enclosing slice
    ("bp":"e") and lands inside a stream slice of the span its id names, at
    that slice's start; the "s" lands on the zero-length enqueue slice of
    the same span on the host side at its cbt.enqueue_ns;
  - the gap between an arrow's ends is the span's cbt.queue_ns (to the
    microsecond-with-three-decimals the file writes), and with --plant-queue
    each request's first stream operation waited at least half the planted 20 ms (the host enqueues the operation after the plant has begun running).

Exit 0 when all hold, 1 naming the first that does not. A missing cbt binary
is a usage error (2).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

PLANTED_MS = 20.0  # CBT_DEMO_PLANT_MS (cli/demo.h)
PHASES = set("XBEiIsftMCbenRPONDpa")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(path, planted):
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        fail("not a JSON object with a traceEvents list")
    ev = doc["traceEvents"]
    for i, e in enumerate(ev):
        for k in ("ph", "ts", "pid", "tid"):
            if k not in e:
                fail("event %d has no %r: %s" % (i, k, e))
        if e["ph"] not in PHASES:
            fail("event %d: unknown phase %r" % (i, e["ph"]))
        if not isinstance(e["ts"], (int, float)) or not isinstance(e["pid"], int) or \
                not isinstance(e["tid"], int):
            fail("event %d: ts/pid/tid of the wrong type: %s" % (i, e))

    proc_name = {}
    thread_name = {}
    for e in ev:
        if e["ph"] != "M":
            continue
        if e["name"] == "process_name":
            proc_name[e["pid"]] = e["args"]["name"]
        elif e["name"] == "thread_name":
            key = (e["pid"], e["tid"])
            if key in thread_name and thread_name[key] != e["args"]["name"]:
                fail("lane %s named twice: %r, %r" % (key, thread_name[key], e["args"]["name"]))
            thread_name[key] = e["args"]["name"]

    slices = [e for e in ev if e["ph"] == "X"]
    by_span = defaultdict(list)
    for e in slices:
        sid = e.get("args", {}).get("span_id")
        if sid:
            by_span[sid].append(e)

    # stream lanes
    lane_of_stream = {}
    stream_of_lane = {}
    n_stream_slices = 0
    for e in slices:
        a = e.get("args", {})
        if "cbt.stream" not in a:
            continue
        n_stream_slices += 1
        dev = a.get("cbt.device")
        want_proc = "CPU streams" if dev == "cpu" else "GPU %s" % dev.split(":", 1)[1]
        if proc_name.get(e["pid"]) != want_proc:
            fail("%s of stream %s (%s) is in process %r, not %r" %
                 (e["name"], a["cbt.stream"], dev, proc_name.get(e["pid"]), want_proc))
        kernel = e.get("cat") == "kernel"
        want = "stream %d%s" % (a["cbt.stream"], " kernels" if kernel else "")
        key = (e["pid"], e["tid"])
        if thread_name.get(key) != want:
            fail("%s of stream %s is on lane %s named %r, not %r" %
                 (e["name"], a["cbt.stream"], key, thread_name.get(key), want))
        skey = (dev, a["cbt.stream"], kernel)
        if lane_of_stream.setdefault(skey, key) != key:
            fail("stream %s has two lanes: %s and %s" % (skey, lane_of_stream[skey], key))
        if stream_of_lane.setdefault(key, skey) != skey:
            fail("lane %s holds two streams: %s and %s" % (key, stream_of_lane[key], skey))
    if n_stream_slices == 0:
        fail("no slice carries cbt.stream: nothing was timed by a stream")
    streams = {(d, s) for (d, s, _k) in lane_of_stream}
    for e in slices:
        if "cbt.stream" not in e.get("args", {}) and e.get("cat") not in ("cta", "kernel") and \
                e["pid"] != 1:
            fail("host span %s is in process %s, not 1" % (e["name"], e["pid"]))

    # flows
    starts = defaultdict(list)
    ends = defaultdict(list)
    for e in ev:
        if e["ph"] == "s":
            starts[e.get("id")].append(e)
        elif e["ph"] == "f":
            ends[e.get("id")].append(e)
    if not starts:
        fail("no flow events")
    if set(starts) != set(ends):
        fail("unpaired flows: starts without an end %s, ends without a start %s" %
             (sorted(set(starts) - set(ends))[:3], sorted(set(ends) - set(starts))[:3]))
    gaps = []
    for fid, ss in starts.items():
        fs = ends[fid]
        if len(ss) != 1 or len(fs) != 1:
            fail("flow %s: %d starts, %d ends" % (fid, len(ss), len(fs)))
        s, f = ss[0], fs[0]
        if (s.get("name"), s.get("cat")) != (f.get("name"), f.get("cat")):
            fail("flow %s: start %s/%s, end %s/%s" % (fid, s.get("name"), s.get("cat"),
                                                      f.get("name"), f.get("cat")))
        if f.get("bp") != "e":
            fail("flow %s: the end does not bind to its enclosing slice (bp %r)" % (fid, f.get("bp")))
        if f["ts"] < s["ts"]:
            fail("flow %s ends before it starts" % fid)
        own = by_span.get(fid, [])
        gpu = [x for x in own if "cbt.stream" in x.get("args", {}) and
               (x["pid"], x["tid"]) == (f["pid"], f["tid"]) and
               x["ts"] <= f["ts"] <= x["ts"] + x["dur"]]
        if len(gpu) != 1:
            fail("flow %s: its end at %s on %s is not inside a stream slice of span %s" %
                 (fid, f["ts"], (f["pid"], f["tid"]), fid))
        g = gpu[0]
        if f["ts"] != g["ts"]:
            fail("flow %s: its end is not at its slice's start" % fid)
        host = [x for x in own if x["pid"] == 1 and x.get("cat") == "enqueue" and
                (x["pid"], x["tid"]) == (s["pid"], s["tid"]) and x["ts"] == s["ts"]]
        if len(host) != 1:
            fail("flow %s: its start at %s on %s is not on the enqueue slice of span %s" %
                 (fid, s["ts"], (s["pid"], s["tid"]), fid))
        a = g["args"]
        if abs(s["ts"] * 1000.0 - a["cbt.enqueue_ns"]) > 1000.0:
            fail("flow %s starts at %s us, its span's cbt.enqueue_ns is %s" %
                 (fid, s["ts"], a["cbt.enqueue_ns"]))
        gap_ns = (f["ts"] - s["ts"]) * 1000.0
        if abs(gap_ns - a["cbt.queue_ns"]) > 1000.0:
            fail("flow %s: the arrow spans %.0f ns, the span's cbt.queue_ns is %d" %
                 (fid, gap_ns, a["cbt.queue_ns"]))
        gaps.append(gap_ns / 1e6)
    timed = {x.get("args", {}).get("span_id") for x in slices if "cbt.enqueue_ns" in x.get("args", {})
             and "cbt.stream" in x.get("args", {})}
    if timed != set(starts):
        fail("%d stream-timed slices but %d flows" % (len(timed), len(starts)))
    longest = max(gaps)
    if planted:
        # each request's first stream operation (the earliest enqueue among
        # its stream-timed operations) waited behind the planted work
        first = {}
        for x in slices:
            a = x.get("args", {})
            if "cbt.stream" not in a or x.get("cat") == "kernel" or "session_id" not in a:
                continue
            sid = a["session_id"]
            if sid not in first or a["cbt.enqueue_ns"] < first[sid]["args"]["cbt.enqueue_ns"]:
                first[sid] = x
        if not first:
            fail("with --plant-queue: no request has a stream operation")
        for sid, x in sorted(first.items()):
            q = x["args"]["cbt.queue_ns"] / 1e6
            # the plant starts running when it is enqueued, and the
            # operation is enqueued after it: its wait is the plant less the
            # host's time between the two calls (3.6 ms under TSan once), so
            # half the plant, still far above an idle stream's microseconds
            if q < PLANTED_MS / 2:
                fail("with --plant-queue: %s's first stream operation, %s, waited %.3f ms, "
                     "less than half the planted %.0f ms" % (sid, x["name"], q, PLANTED_MS))
    print("ok: %d events, %d streams on their own lanes, %d flows paired, the longest "
          "queue %.3f ms" % (len(ev), len(streams), len(starts), longest))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cbt", help="the cbt command: run `cbt demo --cpu --plant-queue` and check")
    ap.add_argument("--file", help="check this trace file instead")
    ap.add_argument("--planted", action="store_true", help="with --file: it is a --plant-queue run")
    o = ap.parse_args()
    if o.file:
        check(o.file, o.planted)
        return
    if not o.cbt or not os.access(o.cbt, os.X_OK):
        print("usage: trace_timeline_check.py --cbt PATH | --file TRACE.json", file=sys.stderr)
        sys.exit(2)
    with tempfile.TemporaryDirectory(prefix="cbt-timeline-") as d:
        trace = os.path.join(d, "trace.json")
        r = subprocess.run([o.cbt, "demo", "--cpu", "--plant-queue", "--requests", "12",
                            "--concurrency", "3", "--trees", "0", "--slowest", "0",
                            "--output", trace, "--spans", os.path.join(d, "spans.jsonl")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        if r.returncode != 0:
            fail("cbt demo --plant-queue exited %d:\n%s" % (r.returncode, r.stdout))
        check(trace, True)


if __name__ == "__main__":
    main()
