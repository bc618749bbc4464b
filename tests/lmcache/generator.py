"""tests/lmcache/generator.py — seeded event streams, as LMCache 0.5.6's
publishers send them (docs/lmcache-0.5.6.md §1.1, §1.2), or 0.5.7's
(docs/lmcache-0.5.7.md §1), with explicit times.

``generate(seed, mp, cb, version=...)`` returns ``Stream``: the events sorted by time (ties
in generation order) and, per session, the scenario that made it (for the
report only: the intended-difference predicates look at events, not labels).

Each request draws a scenario and a start time; requests overlap in time, so
the sorted stream interleaves them. Metadata carries every key the publisher
sends, with its Python type (long model names, ``"<rid>#<n>"`` transfer keys,
lists where LMCache sends lists, ``None`` where it can).

MP scenarios: a full request (lookup, retrieve on a hit, store, phase
samples after each END, the vLLM end-session event), REQUEST_END before the
stream ENDs (deferred), lookup only, store only with REQUEST_END before the
store starts (lazy root) and after it ends, an END without START after
SUBMITTED while deferred, two tensor-parallel workers storing and
retrieving one after the other, an early exit, a timeout raised inside the
request, REQUEST_END twice. CB scenarios: a full request (lookup with
prefix / fingerprint or coordinator / sparse-prefetch sub-spans, retrieve,
scatter), a miss, TP=2 with a CB_REQUEST_END after each worker's retrieve, a
second retrieve call after CB_REQUEST_END, failed scatter and retrieve
(``success`` False, ``worker_id`` None), a published no-op, an END without
START. Apart from requests: session-less timeouts, chunk evictions, late
fingerprint registrations, and event types no tracing subscriber reads
(l1.*, l2.*, sm.*, trace.call, mp.lookup, mp.tokens, ...).

``version="0.5.7"`` makes the same requests from the same draws (the
0.5.7-only values come from a second generator, so the plan, the scenarios
and the 0.5.6 values are the same), with 0.5.7's payloads: every lookup
that gets that far publishes MP_LOOKUP with ``token_ids`` (the whole
prompt; token traces are on, so something subscribes), the CacheBlend
prefix leg does too (blend/lookup.py), MP_LOOKUP_PREFETCH_END carries
``apc_covered_tokens``, ``prompt_tokens``, ``engine_hit_tokens`` and
``request_hit_tokens`` (computed as ``_consume_prefetch_result`` does),
some lookups start past an engine-covered prefix, and early exits include
``load_policy_recompute``. A few lookup ends are sent as 0.5.6 sent them (an
older publisher), which 0.5.7's subscriber fills with zeros.

The tensor-parallel requests whose two workers' STARTs overlap on one
operation form a separate small set (``tp_overlap``): LMCache keeps one
pending span per (session, operation) and loses one there (§2.5), so they
are generated apart and their differences are an intended one.
"""

from __future__ import annotations

import array
import random
from dataclasses import dataclass, field
from typing import Any

T0 = 1_700_000_000.0  # seconds; far before any shutdown wall time

MODELS = (
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-72B-Instruct-AWQ",
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
    "mistralai/Mistral-7B-Instruct-v0.3",
)
CHUNK = 256
H2D, D2H = 0, 1          # lmcache_native.TransferDirection
KERNEL, STAGING = 0, 1   # lmcache.v1.platform.ops_types.TransferPhase

MP_SCENARIOS = (  # (name, weight)
    ("mp_full", 30), ("mp_deferred", 20), ("mp_lookup_only", 10), ("mp_store_only_lazy", 8),
    ("mp_store_only_end_first", 6), ("mp_end_without_start", 6), ("mp_tp2", 10),
    ("mp_early_exit", 4), ("mp_timeout", 4), ("mp_request_end_twice", 2),
)
CB_SCENARIOS = (
    ("cb_full", 35), ("cb_miss", 12), ("cb_tp2", 14), ("cb_second_pass", 10), ("cb_fail", 10),
    ("cb_noop", 8), ("cb_end_without_start", 5), ("cb_coordinator", 6),
)


@dataclass
class Ev:
    type: str                 # LMCache's event value
    ts: float                 # seconds, time.time() scale
    session: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    seq: int = 0              # generation order, the tie-break


@dataclass
class Stream:
    seed: int
    events: list[Ev]
    scenario: dict[str, str]  # session -> scenario name


VOCAB = 151_936  # token ids are drawn below this (Qwen2.5's vocabulary size)


class _Gen:
    def __init__(self, seed: int, version: str = "0.5.6"):
        self.r = random.Random(seed)
        self.v57 = version == "0.5.7"
        self.r57 = random.Random(seed * 1_000_003 + 57)  # 0.5.7-only draws
        self.events: list[Ev] = []
        self.scenario: dict[str, str] = {}
        self.seq = 0
        self.transfer_n = 0

    # -- basics -----------------------------------------------------------
    def emit(self, etype: str, ts: float, session: str = "", **meta: Any) -> None:
        self.seq += 1
        self.events.append(Ev(etype, ts, session, meta, self.seq))

    def rid(self, prefix: str) -> str:
        return f"{prefix}-{self.r.getrandbits(128):032x}-0"

    def transfer_key(self, rid: str) -> str:
        self.transfer_n += 1  # event.next_transfer_key: one process-wide counter
        return f"{rid}#{self.transfer_n}"

    def dt(self, lo: float = 20e-6, hi: float = 900e-6) -> float:
        return self.r.uniform(lo, hi)

    def token_ids(self, n: int) -> list[int]:
        """A prompt of n token ids (0.5.7's MP_LOOKUP token_ids)."""
        raw = array.array("I", self.r57.randbytes(4 * n))  # fast: a long prompt is 4 k ids
        return [x % VOCAB for x in raw]

    # -- MP pieces --------------------------------------------------------
    def lookup(self, sid: str, t: float, model: str, early_exit: str = "") -> tuple[float, int, int]:
        """MP_LOOKUP_PREFETCH_START/END (+ MP_LOOKUP sometimes; under 0.5.7
        whenever the lookup gets that far); (t, hit, requested)."""
        r, rr = self.r, self.r57
        self.emit("mp.lookup_prefetch.start", t, sid)
        chunks = r.randint(1, 16)
        requested = chunks * CHUNK
        hit_chunks = 0 if early_exit else r.choice((0, 0, r.randint(1, chunks)))
        hit = hit_chunks * CHUNK
        l1 = r.randint(0, hit_chunks) * CHUNK
        t += self.dt()
        lookup_hash = r.random() < 0.3  # 0.5.6: only when the lookup-hash logger listens
        # 0.5.7: the prompt (a sub-chunk tail past the chunks), and the
        # load policy declining some lookups (after MP_LOOKUP, lookup.py)
        prompt = requested + (rr.randrange(CHUNK) if self.v57 else 0)
        if self.v57 and not early_exit and rr.random() < 0.05:
            early_exit, hit_chunks, hit, l1 = "load_policy_recompute", 0, 0, 0
        reaches = early_exit not in ("no_gpu_context", "empty_chunk_hashes")
        if lookup_hash or (self.v57 and reaches):
            meta = dict(request_id=sid,
                        chunk_hashes=[r.getrandbits(64) if lookup_hash else rr.getrandbits(64)
                                      for _ in range(chunks)], model_name=model,
                        chunk_size=CHUNK, seq_len=prompt if self.v57 else requested,
                        dtypes=["bfloat16"], shapes=[[2, 32, CHUNK, 8, 128]])
            if self.v57:
                meta["token_ids"] = self.token_ids(prompt)
            self.emit("mp.lookup", t, sid, **meta)
            t += self.dt(5e-6, 50e-6) if lookup_hash else rr.uniform(5e-6, 50e-6)
        salt = r.choice(("", "", "tenant-7f3a91c2"))
        if not self.v57 or rr.random() < 0.05:  # 0.5.6's keys (an older publisher)
            self.emit("mp.lookup_prefetch.end", t, sid, found_count=hit_chunks,
                      requested_tokens=0 if early_exit else requested, hit_tokens=hit,
                      l1_hit_tokens=l1, l2_hit_tokens=hit - l1, l1_hit_keys=l1 // CHUNK * 2,
                      l2_hit_keys=(hit - l1) // CHUNK * 2, early_exit_reason=early_exit,
                      model_name=model, cache_salt=salt)
            return t, hit, requested
        # 0.5.7 (_consume_prefetch_result): the engine may already hold a
        # prefix (key.start); hits count only past it, the hint may be absent
        covered = 0
        if early_exit in ("", "load_policy_recompute") and rr.random() < 0.3:
            covered = rr.randint(1, chunks)  # may be all of it: nothing looked up
        hit_chunks = min(hit_chunks, chunks - covered)
        hit, l1 = hit_chunks * CHUNK, min(l1, hit_chunks * CHUNK)
        looked_up = 0 if early_exit and early_exit != "load_policy_recompute" else \
            requested - covered * CHUNK
        engine = rr.choice((0, covered * CHUNK, covered * CHUNK + rr.randrange(CHUNK)))
        apc = covered * CHUNK
        self.emit("mp.lookup_prefetch.end", t, sid,
                  found_count=hit_chunks + (covered if early_exit == "" else 0),
                  requested_tokens=looked_up, apc_covered_tokens=apc, hit_tokens=hit,
                  l1_hit_tokens=l1, l2_hit_tokens=hit - l1,
                  prompt_tokens=prompt,
                  engine_hit_tokens=engine, request_hit_tokens=max(engine, apc + hit),
                  l1_hit_keys=l1 // CHUNK * 2, l2_hit_keys=(hit - l1) // CHUNK * 2,
                  early_exit_reason=early_exit, model_name=model, cache_salt=salt)
        return t, hit, requested

    def samples(self, t: float, key: str, direction: int, t0: float, t1: float,
                nbytes: int) -> None:
        """MP_TRANSFER_PHASE_SAMPLES after an END: kernel and staging sections."""
        r = self.r
        out = []
        span = max(t1 - t0, 1e-6)
        cursor = t0
        for phase in (KERNEL, STAGING):
            for _ in range(r.randint(1, 3)):
                el = span * r.uniform(0.05, 0.2)
                out.append((phase, direction, r.randint(0, 1), el * 1e3,
                            nbytes // 4 + r.randint(0, 4096), key, cursor, cursor + el))
                cursor += el
        self.emit("mp.transfer.phase_samples", t, "", samples=out, ended_transfer_key=key)

    def transfer(self, sid: str, t: float, op: str, model: str, engine: int, device: str,
                 tokens: int, start: bool = True) -> float:
        """An MP store or retrieve's START (unless not `start`) and END, the
        phase samples after the END; the SUBMITTED is the caller's."""
        r = self.r
        key = self.transfer_key(sid)
        nbytes = max(tokens, CHUNK) * 2 * 32 * 8 * 128 * 2
        t_start = t
        if start:
            self.emit(f"mp.{op}.start", t, sid, device=device, engine_id=engine,
                      model_name=model, transfer_key=key)
        t += self.dt(200e-6, 3e-3)
        if op == "store":
            ok = r.random() > 0.05
            self.emit("mp.store.end", t, sid, stored_count=tokens // CHUNK if ok else 0,
                      device=device, engine_id=engine, model_name=model, total_bytes=nbytes,
                      num_tokens=tokens if ok else 0, transfer_key=key)
        else:
            self.emit("mp.retrieve.end", t, sid, retrieved_count=tokens // CHUNK, device=device,
                      engine_id=engine, model_name=model, cache_salt="", total_bytes=nbytes,
                      num_tokens=tokens, transfer_key=key)
        if start and r.random() < 0.9:
            self.samples(t + self.dt(5e-6, 40e-6), key, D2H if op == "store" else H2D,
                         t_start + 1e-6, t - 1e-6, nbytes)
        return t

    def end_session(self, sid: str, t: float) -> float:
        self.emit("mp.vllm.end_session", t, "", request_id=sid)
        t += self.dt(2e-6, 20e-6)
        self.emit("mp.request.end", t, sid)
        return t

    def mp_request(self, kind: str, t: float) -> None:
        r = self.r
        sid = self.rid("cmpl")
        self.scenario[sid] = kind
        model = r.choice(MODELS)
        dev = "cuda:0"
        engine = r.randint(0, 3)
        if kind in ("mp_store_only_lazy", "mp_store_only_end_first"):
            tokens = r.randint(1, 8) * CHUNK
            self.emit("mp.store.submitted", t, sid, device=dev)
            if kind == "mp_store_only_lazy":
                t = self.end_session(sid, t + self.dt())
            t = self.transfer(sid, t + self.dt(), "store", model, engine, dev, tokens)
            if kind == "mp_store_only_end_first":
                self.end_session(sid, t + self.dt())
            return
        self.emit("mp.request.start", t, sid)
        t += self.dt(5e-6, 50e-6)
        early = r.choice(("no_gpu_context", "empty_chunk_hashes", "no_group_layout_descs")) \
            if kind == "mp_early_exit" else ""
        if early and self.v57 and self.r57.random() < 0.3:
            early = "load_policy_recompute"
        t, hit, requested = self.lookup(sid, t, model, early)
        if kind == "mp_timeout":
            t += self.dt()
            self.emit("timeout.raised", t, sid,
                      message=f"Timed out after 30.0s waiting for the shm transfer of {sid}",
                      exception_type="LMCacheTimeoutError",
                      stacktrace='Traceback (most recent call last):\n  File "lmcache/v1/'
                                 'multiprocess/transfer_context/shm.py", line 212, in wait\n'
                                 '    raise LMCacheTimeoutError(msg, session_id=sid)\n')
        if kind in ("mp_lookup_only", "mp_early_exit"):
            self.end_session(sid, t + self.dt())
            return
        if kind == "mp_request_end_twice":
            t = self.end_session(sid, t + self.dt())
            self.emit("mp.request.end", t + self.dt(), sid)
            return
        if kind == "mp_end_without_start":
            t += self.dt()
            self.emit("mp.store.submitted", t, sid, device=dev)
            t = self.end_session(sid, t + self.dt())
            self.transfer(sid, t + self.dt(), "store", model, engine, dev, CHUNK, start=False)
            return
        new_tokens = max(requested - hit, CHUNK)
        if kind == "mp_tp2":
            # two workers, one after the other (no overlapping STARTs of one op)
            if hit:
                for w in (0, 1):
                    self.emit("mp.retrieve.submitted", t + self.dt(1e-6, 5e-6), sid, device=f"cuda:{w}")
                t += self.dt()
                for w in (0, 1):
                    t = self.transfer(sid, t + self.dt(), "retrieve", model, w, f"cuda:{w}", hit)
            for w in (0, 1):
                self.emit("mp.store.submitted", t + self.dt(1e-6, 5e-6), sid, device=f"cuda:{w}")
            t += self.dt()
            end_at = r.choice((0, 1, 2))  # REQUEST_END before, between, after the stores
            for w in (0, 1):
                if end_at == w:
                    self.end_session(sid, t + self.dt(1e-6, 10e-6))
                    t += 20e-6
                t = self.transfer(sid, t + self.dt(), "store", model, w, f"cuda:{w}", new_tokens)
            if end_at == 2:
                self.end_session(sid, t + self.dt())
            return
        deferred = kind == "mp_deferred"
        if hit:
            t += self.dt()
            self.emit("mp.retrieve.submitted", t, sid, device=dev)
            t += self.dt()
            if deferred and r.random() < 0.5:
                self.emit("mp.store.submitted", t, sid, device=dev)
                t = self.end_session(sid, t + self.dt(2e-6, 10e-6))
                t = self.transfer(sid, t + self.dt(), "retrieve", model, engine, dev, hit)
                self.transfer(sid, t + self.dt(), "store", model, engine, dev, new_tokens)
                return
            t = self.transfer(sid, t, "retrieve", model, engine, dev, hit)
        t += self.dt()
        self.emit("mp.store.submitted", t, sid, device=dev)
        t += self.dt()
        if r.random() < 0.2:
            self.emit("mp.tokens", t, sid, chunk_hashes=[b"\x01" * 8], token_chunks=[[1, 2, 3]],
                      token_offsets=[0], parent_hashes=[None])
        if deferred:
            t2 = self.end_session(sid, t + self.dt(2e-6, 10e-6))
            self.transfer(sid, t2 + self.dt(), "store", model, engine, dev, new_tokens)
        else:
            t = self.transfer(sid, t, "store", model, engine, dev, new_tokens)
            self.end_session(sid, t + self.dt())

    def mp_tp_overlap(self, t: float) -> None:
        """Two workers whose STARTs of one operation overlap (LMCache loses a span)."""
        sid = self.rid("cmpl")
        self.scenario[sid] = "tp_overlap_mp"
        model = self.r.choice(MODELS)
        self.emit("mp.request.start", t, sid)
        t, _, _ = self.lookup(sid, t + self.dt(), model)
        for w in (0, 1):
            self.emit("mp.store.submitted", t + self.dt(1e-6, 5e-6), sid, device=f"cuda:{w}")
        t += self.dt()
        keys = [self.transfer_key(sid) for _ in (0, 1)]
        for w in (0, 1):
            t += self.dt(5e-6, 30e-6)
            self.emit("mp.store.start", t, sid, device=f"cuda:{w}", engine_id=w,
                      model_name=model, transfer_key=keys[w])
        t = self.end_session(sid, t + self.dt())
        for w in (0, 1):
            t += self.dt(200e-6, 1e-3)
            self.emit("mp.store.end", t, sid, stored_count=2, device=f"cuda:{w}", engine_id=w,
                      model_name=model, total_bytes=1 << 21, num_tokens=512,
                      transfer_key=keys[w])

    # -- CB pieces --------------------------------------------------------
    def cb_lookup(self, sid: str, t: float, coordinator: bool, miss: bool) -> tuple[float, int]:
        r = self.r
        chunks = r.randint(2, 16)
        num_tokens = chunks * CHUNK + r.randint(0, CHUNK - 1)
        self.emit("cb.lookup.start", t, sid, num_tokens=num_tokens)
        t += self.dt(5e-6, 40e-6)
        self.emit("cb.prefix_lookup.start", t, sid)
        if self.v57:  # the prefix leg's MP_LOOKUP (blend/lookup.py _submit_prefix_leg)
            rr = self.r57
            t += rr.uniform(2e-6, 10e-6)
            self.emit("mp.lookup", t, sid, request_id=sid,
                      chunk_hashes=[rr.getrandbits(64) for _ in range(chunks)],
                      model_name=rr.choice(MODELS), chunk_size=CHUNK, seq_len=num_tokens,
                      dtypes=["bfloat16"], shapes=[[2, 32, CHUNK, 8, 128]],
                      token_ids=self.token_ids(num_tokens))
        prefix_chunks = 0 if miss else r.randint(0, chunks // 2)
        if coordinator:
            t += self.dt(5e-6, 30e-6)
            self.emit("cb.coordinator_match.start", t, sid)
            t += self.dt()
            self.emit("cb.coordinator_match.end", t, sid, matches=0 if miss else r.randint(0, 6),
                      timed_out=r.random() < 0.2)
        else:
            t += self.dt(5e-6, 30e-6)
            self.emit("cb.fingerprint_match.start", t, sid)
            t += self.dt()
            self.emit("cb.fingerprint_match.end", t, sid, matches=0 if miss else r.randint(0, 6))
        t += self.dt(5e-6, 50e-6)
        self.emit("cb.prefix_lookup.end", t, sid, prefix_chunks=prefix_chunks)
        fp_hits = 0 if miss else r.randint(0, chunks - prefix_chunks)
        l2_keys = 0 if miss else r.choice((0, r.randint(1, 8)))
        if l2_keys:
            t += self.dt(5e-6, 30e-6)
            self.emit("cb.sparse_prefetch.start", t, sid, n_chunks=fp_hits, world_size=1,
                      n_keys=fp_hits * 2, l2_keys=l2_keys)
            t += self.dt()
            self.emit("cb.sparse_prefetch.end", t, sid, found_keys=r.randint(0, l2_keys),
                      l2_keys=l2_keys)
        prefix_tokens = prefix_chunks * CHUNK
        seg = 0 if miss else r.choice((0, 0, r.randint(1, CHUNK - 1)))
        non_prefix = fp_hits * CHUNK
        hit = prefix_tokens + seg + non_prefix
        t += self.dt(5e-6, 50e-6)
        self.emit("cb.lookup.end", t, sid, num_tokens=num_tokens, fingerprint_hits=fp_hits,
                  prefix_hits=prefix_chunks, prefix_chunks=prefix_chunks,
                  storage_hits=fp_hits, stale_chunks=r.choice((0, 0, 1)),
                  no_gpu_context=False, prefix_hit_tokens=prefix_tokens,
                  segmented_prefix_hit_tokens=seg, non_prefix_hit_tokens=non_prefix,
                  hit_tokens=hit, requested_tokens=chunks * CHUNK)
        return t, hit

    def cb_retrieve(self, sid: str, t: float, worker: Any, model: str, hit: int,
                    ok: bool = True, start: bool = True) -> float:
        """One retrieve call from CB_RETRIEVE_START to its CB_REQUEST_END; the
        SUBMITTED is the caller's."""
        r = self.r
        chunks = max(hit // CHUNK, 1)
        if start:
            self.emit("cb.retrieve.start", t, sid, num_chunks=chunks, model_name=model,
                      worker_id=worker)
            t += self.dt(10e-6, 100e-6)
            n_prefix = r.randint(0, 3)
            self.emit("cb.scatter.start", t, sid, scattered_tokens=hit, n_prefix=n_prefix,
                      n_shifted=r.randint(0, 4), dropped=r.choice((0, 0, 1)), worker_id=worker)
            t += self.dt(100e-6, 2e-3)
            self.emit("cb.scatter.end", t, sid, success=ok, worker_id=worker)
        t += self.dt(5e-6, 50e-6)
        self.emit("cb.retrieve.end", t, sid, success=ok, worker_id=worker)
        t += self.dt(2e-6, 20e-6)
        self.emit("cb.request.end", t, sid)
        return t

    def cb_request(self, kind: str, t: float) -> None:
        r = self.r
        sid = self.rid("chatcmpl")
        self.scenario[sid] = kind
        model = r.choice(MODELS)
        self.emit("cb.request.start", t, sid)
        t, hit = self.cb_lookup(sid, t + self.dt(2e-6, 20e-6), kind == "cb_coordinator",
                                kind == "cb_miss")
        if kind == "cb_miss" or hit == 0:
            self.emit("cb.request.end", t + self.dt(2e-6, 20e-6), sid)  # from cb_unified_lookup
        elif kind == "cb_noop":
            t += self.dt()
            self.emit("cb.retrieve.noop", t, sid,
                      reason=r.choice(("matches_straddle_alloc", "no_object_keys")),
                      dropped_matches=r.randint(1, 4))
            self.emit("cb.request.end", t + self.dt(2e-6, 10e-6), sid)
        elif kind == "cb_tp2":
            for w in (0, 1):
                self.emit("cb.retrieve.submitted", t + self.dt(1e-6, 5e-6), sid, instance_id=w)
            t += self.dt()
            for w in (0, 1):  # one after the other
                t = self.cb_retrieve(sid, t + self.dt(), w, model, hit)
        elif kind == "cb_second_pass":
            # vLLM's partial-then-full allocation: the first call takes the
            # (unpublished) matches_beyond_alloc no-scatter path
            t += self.dt()
            self.emit("cb.request.end", t, sid)
            t += self.dt(1e-3, 5e-3)
            self.emit("cb.retrieve.submitted", t, sid, instance_id=0)
            self.cb_retrieve(sid, t + self.dt(), 0, model, hit)
        elif kind == "cb_end_without_start":
            t += self.dt()
            self.emit("cb.retrieve.submitted", t, sid, instance_id=0)
            self.cb_retrieve(sid, t + self.dt(), 0, model, hit, start=False)
        else:  # cb_full, cb_coordinator, cb_fail
            t += self.dt()
            self.emit("cb.retrieve.submitted", t, sid, instance_id=0)
            worker = None if kind == "cb_fail" and r.random() < 0.5 else 0
            t = self.cb_retrieve(sid, t + self.dt(), worker, model, hit,
                                 ok=kind != "cb_fail")
        if r.random() < 0.3:  # registration drains after the request: its own trace in LMCache
            self.emit("cb.fingerprints.registered", t + self.dt(1e-3, 5e-3), sid,
                      num_chunks=r.randint(1, 8), num_tokens=r.randint(1, 8) * CHUNK)

    def cb_tp_overlap(self, t: float) -> None:
        sid = self.rid("chatcmpl")
        self.scenario[sid] = "tp_overlap_cb"
        model = self.r.choice(MODELS)
        self.emit("cb.request.start", t, sid)
        t, hit = self.cb_lookup(sid, t + self.dt(), False, False)
        hit = max(hit, CHUNK)
        for w in (0, 1):
            self.emit("cb.retrieve.submitted", t + self.dt(1e-6, 5e-6), sid, instance_id=w)
        t += self.dt()
        for w in (0, 1):
            t += self.dt(5e-6, 30e-6)
            self.emit("cb.retrieve.start", t, sid, num_chunks=hit // CHUNK, model_name=model,
                      worker_id=w)
        for w in (0, 1):
            t += self.dt(100e-6, 1e-3)
            self.emit("cb.retrieve.end", t, sid, success=True, worker_id=w)
            self.emit("cb.request.end", t + self.dt(2e-6, 10e-6), sid)

    # -- outside requests -------------------------------------------------
    def background(self, t0: float, t1: float, n: int) -> None:
        r = self.r
        for _ in range(n):
            t = r.uniform(t0, t1)
            k = r.randrange(10)
            if k == 0:
                self.emit("timeout.raised", t, "", message="Timed out waiting for the L2 adapter",
                          exception_type="LMCacheTimeoutError",
                          stacktrace="Traceback (most recent call last):\n  ...\n")
            elif k == 1:
                self.emit("cb.chunks.evicted", t, "", num_chunks=r.randint(1, 64))
            elif k == 2:
                self.emit("l1.read.reserved", t, "", l1_tag="l1-0", keys=[r.getrandbits(32)])
            elif k == 3:
                self.emit("l1.eviction.loop_tick", t, "", usage=r.random(), watermark=0.9,
                          triggered=r.random() < 0.1)
            elif k == 4:
                self.emit("l2.store.submitted", t, "", adapter_index=0, task_id=r.randint(1, 1 << 20),
                          l2_name="nixl-store-0", key_count=4, total_bytes=1 << 22,
                          key_count_per_salt={"": 4})
            elif k == 5:
                rid = r.randint(1, 1 << 20)
                self.emit("l2.load_task.submitted", t, "", request_id=rid, adapter_index=0,
                          task_id=rid, l2_name="nixl-store-0", key_count=2, total_bytes=1 << 21)
                self.emit("l2.load_task.completed", t + self.dt(), "", request_id=rid,
                          adapter_index=0, task_id=rid, l2_name="nixl-store-0")
            elif k == 6:
                self.emit("sm.capacity.changed", t, "",
                          snapshot={"l1_used": 1 << 30, "l1_total": 1 << 34})
            elif k == 7:
                self.emit("trace.call", t, "",
                          qualname="lmcache.v1.distributed.storage_manager.StorageManager.finish_write",
                          args={"keys": [1, 2]}, t_mono=r.uniform(0, 1e4))
            elif k == 8:
                self.emit("mp.vllm.block_allocation", t, "", instance_id=0, model_name=r.choice(MODELS),
                          records=[{"req_id": "x", "new_block_ids": [1], "new_token_ids": [2]}])
            else:
                self.emit("l2.keys.evicted", t, "", key_count=3, key_count_per_salt={"": 3})


def generate(seed: int = 20240506, mp: int = 300, cb: int = 300, overlap: int = 6,
             version: str = "0.5.6") -> Stream:
    """The seeded stream: `mp` MP and `cb` CB requests, `overlap` tensor-parallel
    requests of each path with overlapping STARTs, background events, with
    the payloads of LMCache `version` ("0.5.6" or "0.5.7")."""
    if version not in ("0.5.6", "0.5.7"):
        raise ValueError(f"no stream for LMCache {version}")
    g = _Gen(seed, version)
    r = g.r
    t = T0 + r.uniform(0, 1)
    names_mp = [n for n, _ in MP_SCENARIOS]
    w_mp = [w for _, w in MP_SCENARIOS]
    names_cb = [n for n, _ in CB_SCENARIOS]
    w_cb = [w for _, w in CB_SCENARIOS]
    t_begin = t
    plan = ["mp"] * mp + ["cb"] * cb + ["mp_x"] * overlap + ["cb_x"] * overlap
    r.shuffle(plan)
    for p in plan:
        t += r.uniform(100e-6, 2e-3)  # arrivals overlap: requests last several ms
        if p == "mp":
            g.mp_request(r.choices(names_mp, w_mp)[0], t)
        elif p == "cb":
            g.cb_request(r.choices(names_cb, w_cb)[0], t)
        elif p == "mp_x":
            g.mp_tp_overlap(t)
        else:
            g.cb_tp_overlap(t)
    g.background(t_begin, t, max(20, (mp + cb) // 10))
    events = sorted(g.events, key=lambda e: (e.ts, e.seq))
    return Stream(seed, events, g.scenario)
