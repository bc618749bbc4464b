"""tests/python/test_otlp_json.py — cbt.init(otlp_json_path=...): the OTLP JSON
file (the OpenTelemetry Collector file exporter's format, one
ExportTraceServiceRequest per line) from Python, from CBT_OTLP_JSON_PATH, its
errors, and python -m cbt.lmcache's --otlp-json-path.

Each line is parsed alone by protobuf's json_format into
opentelemetry-proto's ExportTraceServiceRequest when the package is
importable (tests/otlp_decode.py checks the encoding field by field with it in
ctest); without it the lines are still read as JSON and checked here, and the
official-decoder part says SKIP.
"""
import base64
import json
import os
import subprocess
import sys

import pytest

import cbt
import cbt._cbt
from cbt.lmcache.__main__ import take_otlp_json_arg


def _publish_request(sid):
    cbt.publish("MP_REQUEST_START", sid)
    cbt.publish("MP_LOOKUP_PREFETCH_START", sid, num_tokens=2048)
    cbt.publish("MP_LOOKUP_PREFETCH_END", sid, hit_tokens=1536, requested_tokens=2048)
    cbt.publish("MP_REQUEST_END", sid)


def _lines(path):
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    assert text.endswith("\n"), "the OTLP JSON file does not end with a whole line"
    return [json.loads(line) for line in text[:-1].split("\n")]


def _spans(docs):
    out = []
    for d in docs:
        (rs,) = d["resourceSpans"]
        (ss,) = rs["scopeSpans"]
        assert ss["scope"]["name"] == "cbt"
        out += [(rs["resource"], s) for s in ss["spans"]]
    return out


def _official(doc):
    """The line through json_format into ExportTraceServiceRequest (hex ids
    to base64, which the generic proto3 JSON mapping expects for bytes)."""
    try:
        from google.protobuf import json_format
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    except Exception as e:  # not installed, or a runtime that does not fit
        pytest.skip(f"opentelemetry-proto is not importable: {e!r}")
    doc = json.loads(json.dumps(doc))
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for k in ("traceId", "spanId", "parentSpanId"):
                    if k in sp:
                        sp[k] = base64.b64encode(bytes.fromhex(sp[k])).decode()
    req = trace_service_pb2.ExportTraceServiceRequest()
    json_format.Parse(json.dumps(doc), req)
    return req


def _run(path):
    assert not cbt.enabled()
    cbt.init(otlp_json_path=path, otlp_endpoint="", service_name="otlp-json-test")
    try:
        _publish_request("ojson-py-1")
    finally:
        cbt.shutdown()
    return _lines(path)


def test_init_writes_otlp_json(tmp_path):
    docs = _run(tmp_path / "spans.otlp.jsonl")
    spans = _spans(docs)
    names = sorted(s["name"] for _, s in spans)
    assert names == ["mp.lookup_prefetch", "request"], names
    for res, _ in spans:
        attrs = {a["key"]: a["value"] for a in res["attributes"]}
        assert attrs["service.name"] == {"stringValue": "otlp-json-test"}
    (root,) = [s for _, s in spans if s["name"] == "request"]
    (lp,) = [s for _, s in spans if s["name"] == "mp.lookup_prefetch"]
    assert lp["parentSpanId"] == root["spanId"] and lp["traceId"] == root["traceId"]
    assert "parentSpanId" not in root
    assert int(root["startTimeUnixNano"]) <= int(lp["startTimeUnixNano"])
    attrs = {a["key"]: a["value"] for a in root["attributes"]}
    assert attrs["hit_tokens"] == {"intValue": "1536"}
    assert attrs["session_id"] == {"stringValue": "ojson-py-1"}


def test_lines_parse_with_the_official_decoder(tmp_path):
    docs = _run(tmp_path / "spans.otlp.jsonl")
    got = []
    for d in docs:
        req = _official(d)
        (rs,) = req.resource_spans
        assert any(a.key == "service.name" and a.value.string_value == "otlp-json-test"
                   for a in rs.resource.attributes)
        for sp in rs.scope_spans[0].spans:
            got.append(sp.name)
            assert len(sp.trace_id) == 16 and len(sp.span_id) == 8
            assert sp.end_time_unix_nano >= sp.start_time_unix_nano > 0
            if sp.name == "request":
                a = {kv.key: kv.value for kv in sp.attributes}
                assert a["hit_tokens"].int_value == 1536
    assert sorted(got) == ["mp.lookup_prefetch", "request"]


def test_env_variable(tmp_path):
    path = tmp_path / "env.otlp.jsonl"
    env = dict(os.environ, CBT_OTLP_JSON_PATH=str(path))
    for k in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        env.pop(k, None)
    code = ("import cbt\ncbt.init(otlp_endpoint='')\n"
            "cbt.publish('MP_REQUEST_START', 'e1')\ncbt.publish('MP_REQUEST_END', 'e1')\n"
            "cbt.shutdown()\n")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert [s["name"] for _, s in _spans(_lines(path))] == ["request"]
    # "" turns it off whatever the environment says
    path.unlink()
    code2 = code.replace("cbt.init(otlp_endpoint='')",
                         "cbt.init(otlp_endpoint='', otlp_json_path='')")
    p = subprocess.run([sys.executable, "-c", code2], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert not path.exists()


def test_bad_path_is_an_error_at_init(tmp_path):
    assert not cbt.enabled()
    with pytest.raises(cbt.Error) as ei:
        cbt.init(otlp_json_path="/nonexistent-dir/x.jsonl", otlp_endpoint="")
    assert ei.value.status == cbt._cbt.ERR_IO
    assert "OTLP JSON file" in str(ei.value) and "/nonexistent-dir/x.jsonl" in str(ei.value)
    assert not cbt.enabled()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(cbt.Error) as ei:
        cbt.init(otlp_json_path=fifo, otlp_endpoint="")
    assert "FIFO" in str(ei.value)
    assert not cbt.enabled()
    with pytest.raises(TypeError):
        cbt.init(otlp_json_path=3)


def test_bridge_refuses_the_file_without_an_endpoint(capsys):
    # LMCache's --enable-tracing refuses to start without --otlp-endpoint:
    # said by the bridge, exit 2, before LMCache is imported
    from cbt.lmcache.__main__ import main
    assert main(["server", "--enable-tracing", "--otlp-json-path", "o.jsonl"]) == 2
    err = capsys.readouterr().err
    assert "--otlp-json-path needs --otlp-endpoint" in err


def test_bridge_flag():
    assert take_otlp_json_arg(["server", "--enable-tracing", "--otlp-json-path", "o.jsonl",
                               "--port", "1"]) == (
        ["server", "--enable-tracing", "--port", "1"], {"otlp_json_path": "o.jsonl"})
    assert take_otlp_json_arg(["server", "--otlp-json-path=o.jsonl"]) == (
        ["server"], {"otlp_json_path": "o.jsonl"})
    assert take_otlp_json_arg(["server", "--", "--otlp-json-path", "x"]) == (
        ["server", "--", "--otlp-json-path", "x"], {})
    for bad in (["--otlp-json-path"], ["--otlp-json-path", "--port"],
                ["--otlp-json-path", "a", "--otlp-json-path=b"]):
        with pytest.raises(ValueError):
            take_otlp_json_arg(bad)
