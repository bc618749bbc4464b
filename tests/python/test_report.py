"""tests/python/test_report.py — ``cbt.report`` and ``python -m cbt report``
(docs/python.md, "Reports"; docs/report.md): the command the package carries
runs on a span file written here, with one operation planted to queue about
1.6 ms on its stream, and both the terminal report and the HTML page name it;
bad inputs come back as the command's exit status, named on stderr."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

import cbt


def _span(trace: int, sid: int, parent: int, name: str, start: int, end: int,
          **attrs: object) -> str:
    return json.dumps({
        "trace_id": f"{trace:032x}", "span_id": f"{sid:016x}",
        "parent_span_id": f"{parent:016x}" if parent else "", "name": name,
        "kind": "internal", "start_ns": start, "end_ns": end, "status": "unset",
        "incomplete": False, "attributes": {"session_id": f"req-{trace}", **attrs},
        "dropped_attributes": 0, "events": [], "dropped_events": 0,
        "truncated_attributes": 0})


def _write_spans(path: str, requests: int = 50, planted: str = "cb.scatter",
                 first: int = 1) -> None:
    t = 1_800_000_000_000_000_000
    lines = []
    for r in range(first, first + requests):
        t0 = t + r * 100_000
        enq = t0 + 5_000
        ops = []
        for k, op in enumerate(("cb.l2_load", "cb.scatter", "cb.gather")):
            q = 1_600_000 if op == planted else 10_000 + 1_000 * k
            start = enq + q
            end = start + 200_000
            ops.append(_span(r, 10 + k, 1, op, start, end, **{"cbt.queue_ns": q,
                                                               "cbt.enqueue_ns": enq}))
            enq = end
        lines += ops
        lines.append(_span(r, 1, 0, "request", t0, t0 + 30_000, hit_rate=0.5,
                           **{"cbt.gpu_tail_ns": enq - t0 - 30_000}))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def test_report_names_the_planted_queue(tmp_path):
    spans = str(tmp_path / "spans.jsonl")
    html = tmp_path / "report.html"
    _write_spans(spans)
    out = io.StringIO()
    assert cbt.report(spans, html=html, slowest=2, out=out) == 0
    text = out.getvalue()
    assert text.startswith("cbt report: 1 file, 200 spans, 50 requests")
    assert "COMPLETENESS: whole" in text
    assert "MOST QUEUEING: cb.scatter waited" in text
    page = html.read_text()
    assert ("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'; img-src data:\">") in page
    assert 'id="slowest-queue" class="cbt-slowest" data-op="cb.scatter"' in page
    assert 'id="plot-waterfall-2"' in page and "<script" not in page


def test_report_several_paths_and_pathlike(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write_spans(str(a), 10)
    _write_spans(str(b), 10, planted="cb.gather", first=11)
    out = io.StringIO()
    assert cbt.report([a, os.fsencode(str(b))], slowest=0, out=out) == 0
    assert "cbt report: 2 files, 80 spans, 20 requests" in out.getvalue()
    assert "COMPLETENESS: whole" in out.getvalue()
    out = io.StringIO()
    assert cbt.report([a, a], slowest=0, out=out) == 0  # a file given twice
    assert "NOT WHOLE: 40 duplicate spans" in out.getvalue()


def test_report_bad_inputs(tmp_path, capsys):
    missing = str(tmp_path / "missing.jsonl")
    assert cbt.report(missing, out=io.StringIO()) == 2
    assert f"cbt report: {missing}: cannot open" in capsys.readouterr().err
    spans = str(tmp_path / "s.jsonl")
    _write_spans(spans, 3)
    with open(spans, "a") as f:
        f.write("not json\n")
    out = io.StringIO()
    assert cbt.report(spans, out=out) == 0  # a bad line is counted, not fatal
    assert "NOT WHOLE: 1 bad line" in out.getvalue()
    assert f"{spans}:13: " in out.getvalue()
    assert cbt.report(spans, slowest=101, out=io.StringIO()) == 2
    with pytest.raises(TypeError):
        cbt.report(spans, slowest="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        cbt.report([])


def test_python_m_cbt_report(tmp_path):
    spans = str(tmp_path / "spans.jsonl")
    _write_spans(spans, 5)
    p = subprocess.run([sys.executable, "-m", "cbt", "report", spans, "--slowest", "1"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "MOST QUEUEING: cb.scatter" in p.stdout
