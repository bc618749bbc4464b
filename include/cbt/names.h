/* cbt/names.h — interned strings: span names, attribute and metadata keys.
 *
 * A name is turned into a small integer handle once (cbt_intern) and passed
 * by handle on the hot path, the way NVTX registers strings. Names are at
 * most CBT_NAME_LEN_MAX - 1 bytes.
 *
 * The names cbt itself uses are predefined with fixed handles (CBT_N_*):
 * the span names and attribute keys of its builders, exporters and CUPTI,
 * and every LMCache 0.5.6 and 0.5.7 metadata key. They are always there, take no room
 * from a program's names, and interning one never fails.
 *
 * A program's own names fill a table of a bounded capacity:
 * CBT_NAMES_CAPACITY_DEFAULT names beyond the built-in ones, raised by
 * cbt_config.names_capacity at cbt_init() or by the environment variable
 * CBT_NAMES_CAPACITY (read at the table's first use), up to
 * CBT_NAMES_CAPACITY_MAX (the 16-bit handle's range). Entries are allocated
 * 1024 at a time as the table grows (64 KiB each); a lookup is a hash probe
 * with no lock, an insertion takes one mutex.
 *
 * Full: cbt_intern() refuses a new name with CBT_ERR_FULL, counts it
 * (cbt_metrics.names_refused) and says the capacity and how to raise it in
 * cbt_last_error(). A caller with a value under a refused key drops that
 * value, never the event (the Python package does; docs/python.md,
 * "Limits").
 *
 * Lifetime: the table is the process's, not a tracer's. A handle names its
 * string for the life of the process: callers keep handles in statics, and
 * spans hold handles until a sink has written them, which may be after
 * cbt_shutdown() returns (a sink thread given up on at shutdown finishes its
 * write later). So neither cbt_shutdown() nor a later cbt_init() empties
 * the table or lowers its capacity; a capacity once raised stays raised.
 *
 * CBT_DISABLE (defined before the first cbt include): the handles stay
 * defined; cbt_intern() stores handle 0 and returns CBT_OK, cbt_name_str()
 * returns "" and cbt_name_len() 0, all static inline, no cbt symbol.
 */
#ifndef CBT_NAMES_H
#define CBT_NAMES_H

#include <stdint.h>
#include "cbt/api.h"
#include "cbt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most handles there can be: cbt_name is 16 bits and 0 is "no name". */
#define CBT_NAMES_MAX 65535u
#define CBT_NAME_LEN_MAX 64
/* A program's names (beyond the built-in ones) the table holds by default. */
#define CBT_NAMES_CAPACITY_DEFAULT 4096u

typedef uint16_t cbt_name; /* 0 is "no name" */

/* X(handle suffix, string). Order is ABI: append only. */
#define CBT_WELL_KNOWN_NAMES(X)                                   \
    /* span names (MP path) */                                     \
    X(REQUEST, "request")                                          \
    X(MP_STORE, "mp.store")                                        \
    X(MP_RETRIEVE, "mp.retrieve")                                  \
    X(MP_LOOKUP_PREFETCH, "mp.lookup_prefetch")                    \
    /* registry logical names (seed: "request", "store", ...) */   \
    X(STORE, "store")                                              \
    X(RETRIEVE, "retrieve")                                        \
    X(LOOKUP_PREFETCH, "lookup_prefetch")                          \
    /* attribute / metadata keys */                                \
    X(SESSION_ID, "session_id")                                    \
    X(HIT_TOKENS, "hit_tokens")                                    \
    X(REQUESTED_TOKENS, "requested_tokens")                        \
    X(HIT_RATE, "hit_rate")                                        \
    X(DEVICE, "device")                                            \
    X(STORED_COUNT, "stored_count")                                \
    X(FOUND_COUNT, "found_count")                                  \
    X(NUM_TOKENS, "num_tokens")                                    \
    X(INCOMPLETE, "cbt.incomplete")                                \
    X(WORKER, "worker")                                            \
    /* CacheBlend / device path span names */                      \
    X(CB_REQUEST, "cb.request")                                    \
    X(CB_LOOKUP, "cb.lookup")                                      \
    X(CB_RETRIEVE, "cb.retrieve")                                  \
    X(CB_SCATTER, "cb.scatter")                                    \
    X(CB_L2_LOAD, "cb.l2_load")                                    \
    /* kernel spans (device path) */                               \
    X(CB_GATHER, "cb.gather")                                      \
    X(CB_REROPE, "cb.rerope")                                      \
    X(GPU_KERNEL, "gpu.kernel")                                    \
    X(LAUNCH_ID, "launch_id")                                      \
    X(KOP, "kop")                                                  \
    X(N_CTAS, "n_ctas")                                            \
    X(SCATTERED_TOKENS, "scattered_tokens")                        \
    X(SLOT_WRITES, "slot_writes")                                  \
    X(N_PREFIX, "n_prefix")                                        \
    X(N_SHIFTED, "n_shifted")                                      \
    X(DROPPED, "dropped")                                          \
    X(PARTIAL_BLOCKS, "partial_blocks")                            \
    X(CHUNKS, "chunks")                                            \
    X(BYTES, "bytes")                                              \
    X(GBPS, "gbps")                                                \
    X(TOKENS, "tokens")                                            \
    X(USER_VALUE, "user_value")                                    \
    X(NUM_LAYERS, "num_layers")                                    \
    /* CacheBlend V3 server path (cb_subscriber.c, cbt/cb.h) */     \
    X(CB_FINGERPRINT_MATCH, "cb.fingerprint_match")                \
    X(CB_COORDINATOR_MATCH, "cb.coordinator_match")                \
    X(CB_SPARSE_PREFETCH, "cb.sparse_prefetch")                    \
    X(CB_CLASSIFY, "cb.classify")                                  \
    X(CB_FINGERPRINTS_REGISTERED, "cb.fingerprints.registered")    \
    X(CB_CHUNKS_EVICTED, "cb.chunks.evicted")                      \
    X(CB_RETRIEVE_NOOP, "cb.retrieve.noop")                        \
    X(REQUEST_ID, "request_id")                                    \
    X(PREFIX_COVERAGE_TOKENS, "prefix_coverage_tokens")            \
    X(FINGERPRINT_HITS, "fingerprint_hits")                        \
    X(STORAGE_HITS, "storage_hits")                                \
    X(STALE_CHUNKS, "stale_chunks")                                \
    X(PREFIX_HIT_TOKENS, "prefix_hit_tokens")                      \
    X(NON_PREFIX_HIT_TOKENS, "non_prefix_hit_tokens")              \
    X(PREFIX_HITS, "prefix_hits")                                  \
    X(SCATTER_MS, "scatter_ms")                                    \
    X(N_SHIFTED_TOKENS, "n_shifted_tokens")                        \
    X(N_PREFIX_TOKENS, "n_prefix_tokens")                          \
    X(REASON, "reason")                                            \
    /* CacheBlend plugin side: scheduler and worker (cbt/pspan.h) */ \
    X(CB_SCHEDULE, "cb.schedule")                                  \
    X(CB_LOOKUP_RPC, "cb.lookup.rpc")                              \
    X(CB_BUILD_META, "cb.build_meta")                              \
    X(CB_EXECUTE, "cb.execute")                                    \
    X(CB_START_LOAD_KV, "cb.start_load_kv")                        \
    X(CB_MODEL_FORWARD, "cb.model_forward")                        \
    X(CB_FULL_RECOMP, "cb.full_recomp")                            \
    X(CB_CHECK, "cb.check")                                        \
    X(CB_PARTIAL, "cb.partial")                                    \
    X(N_POLLS, "n_polls")                                          \
    X(IMP_COUNT, "imp_count")                                      \
    X(RECOMP_RATIO, "recomp_ratio")                                \
    X(DISPATCH, "dispatch")                                        \
    X(IMP_EMPTY, "imp_empty")                                      \
    X(MODEL, "model")                                              \
    X(WORLD_SIZE, "world_size")                                    \
    X(N_PROMPT_TOKENS, "n_prompt_tokens")                          \
    X(PREFIX_CHUNKS, "prefix_chunks")                              \
    X(FAILED, "failed")                                            \
    X(COUNT, "count")                                              \
    X(SUCCESS, "success")                                          \
    X(ERROR, "error")                                              \
    X(EXCEPTION, "exception")                                      \
    /* LMCache 0.5.6 spans and attributes (docs/lmcache-0.5.6.md) */ \
    X(CB_PREFIX_LOOKUP, "cb.prefix_lookup")                        \
    X(TIMEOUT, "timeout")                                          \
    X(TRANSFER_KERNEL_INTERVAL, "transfer.kernel_interval")        \
    X(TRANSFER_STAGING, "transfer.staging")                        \
    X(L1_HIT_TOKENS, "l1_hit_tokens")                              \
    X(L2_HIT_TOKENS, "l2_hit_tokens")                              \
    X(L1_HIT_RATE, "l1_hit_rate")                                  \
    X(L2_HIT_RATE, "l2_hit_rate")                                  \
    X(L1_HIT_KEYS, "l1_hit_keys")                                  \
    X(L2_HIT_KEYS, "l2_hit_keys")                                  \
    X(EARLY_EXIT_REASON, "early_exit_reason")                      \
    X(SEGMENTED_PREFIX_HIT_TOKENS, "segmented_prefix_hit_tokens")  \
    X(PREFIX_HIT_RATE, "prefix_hit_rate")                          \
    X(SEGMENTED_PREFIX_HIT_RATE, "segmented_prefix_hit_rate")      \
    X(NON_PREFIX_HIT_RATE, "non_prefix_hit_rate")                  \
    X(TRANSFER_KEY, "transfer_key")                                \
    X(MESSAGE, "message")                                          \
    X(EXCEPTION_TYPE, "exception_type")                            \
    X(STACKTRACE, "stacktrace")                                    \
    X(EXC_TYPE, "exception.type")                                  \
    X(EXC_MESSAGE, "exception.message")                            \
    X(EXC_STACKTRACE, "exception.stacktrace")                      \
    X(PHASE, "phase")                                              \
    X(DIRECTION, "direction")                                      \
    X(DEVICE_INDEX, "device_index")                                \
    X(ELAPSED_MS, "elapsed_ms")                                    \
    X(NBYTES, "nbytes")                                            \
    X(START_TIME_S, "start_time_s")                                \
    X(END_TIME_S, "end_time_s")                                    \
    X(ENDED_TRANSFER_KEY, "ended_transfer_key")                    \
    X(NUM_STEPS, "num_steps")                                      \
    X(ELAPSED_SECONDS, "elapsed_seconds")                          \
    X(FIRST_START_S, "first_start_s")                              \
    X(LAST_END_S, "last_end_s")                                    \
    X(THROUGHPUT_GBPS, "throughput_GB_per_second")                 \
    X(NUM_CHUNKS, "num_chunks")                                    \
    X(GPU_TAIL_NS, "cbt.gpu_tail_ns")                              \
    X(EVICTED, "cbt.evicted")                                      \
    X(LATE, "cbt.late")                                            \
    /* LMCache 0.5.6 metadata keys not named above (docs/lmcache-0.5.6.md \
     * §1): a program's first use of one never meets a full table */   \
    X(MODEL_NAME, "model_name")                                    \
    X(CACHE_SALT, "cache_salt")                                    \
    X(CHUNK_HASHES, "chunk_hashes")                                \
    X(CHUNK_SIZE, "chunk_size")                                    \
    X(SEQ_LEN, "seq_len")                                          \
    X(DTYPES, "dtypes")                                            \
    X(SHAPES, "shapes")                                            \
    X(ENGINE_ID, "engine_id")                                      \
    X(TOTAL_BYTES, "total_bytes")                                  \
    X(RETRIEVED_COUNT, "retrieved_count")                          \
    X(INSTANCE_ID, "instance_id")                                  \
    X(RECORDS, "records")                                          \
    X(TOKEN_CHUNKS, "token_chunks")                                \
    X(TOKEN_OFFSETS, "token_offsets")                              \
    X(PARENT_HASHES, "parent_hashes")                              \
    X(SAMPLES, "samples")                                          \
    X(MATCHES, "matches")                                          \
    X(TIMED_OUT, "timed_out")                                      \
    X(N_CHUNKS, "n_chunks")                                        \
    X(N_KEYS, "n_keys")                                            \
    X(L2_KEYS, "l2_keys")                                          \
    X(FOUND_KEYS, "found_keys")                                    \
    X(NO_GPU_CONTEXT, "no_gpu_context")                            \
    X(WORKER_ID, "worker_id")                                      \
    X(DROPPED_MATCHES, "dropped_matches")                          \
    X(L1_TAG, "l1_tag")                                            \
    X(KEYS, "keys")                                                \
    X(TAG, "tag")                                                  \
    X(META, "meta")                                                \
    X(USAGE, "usage")                                              \
    X(WATERMARK, "watermark")                                      \
    X(TRIGGERED, "triggered")                                      \
    X(DURING, "during")                                            \
    X(SUCCEEDED_KEYS, "succeeded_keys")                            \
    X(FAILED_KEYS, "failed_keys")                                  \
    X(SNAPSHOT, "snapshot")                                        \
    X(ADAPTER_INDEX, "adapter_index")                              \
    X(TASK_ID, "task_id")                                          \
    X(L2_NAME, "l2_name")                                          \
    X(KEY_COUNT, "key_count")                                      \
    X(KEY_COUNT_PER_SALT, "key_count_per_salt")                    \
    X(BYTES_TRANSFERRED, "bytes_transferred")                      \
    X(SUCCEEDED_COUNT, "succeeded_count")                          \
    X(FAILED_COUNT, "failed_count")                                \
    X(ADAPTER_COUNT, "adapter_count")                              \
    X(LOADED_COUNT, "loaded_count")                                \
    X(SIZES, "sizes")                                              \
    X(BACKEND, "backend")                                          \
    X(SHARED, "shared")                                            \
    X(QUALNAME, "qualname")                                        \
    X(ARGS, "args")                                                \
    X(T_MONO, "t_mono")                                            \
    /* CUPTI kernel activity (host/device/cupti.c), NVTX (exporter/nvtx.c) */ \
    X(KERNEL_NAME, "kernel.name")                                  \
    X(GRID_X, "grid_x")                                            \
    X(GRID_Y, "grid_y")                                            \
    X(GRID_Z, "grid_z")                                            \
    X(BLOCK_X, "block_x")                                          \
    X(BLOCK_Y, "block_y")                                          \
    X(BLOCK_Z, "block_z")                                          \
    X(STREAM, "stream")                                            \
    X(REGISTERS_PER_THREAD, "registers_per_thread")                \
    X(STATIC_SHARED_MEMORY, "static_shared_memory")                \
    X(DYNAMIC_SHARED_MEMORY, "dynamic_shared_memory")              \
    X(CORRELATION_ID, "correlation_id")                            \
    X(NVTX_RANGE_ID, "nvtx.range_id")                              \
    /* queue time on stream-timed spans (docs/spans.md, "Queue time") */ \
    X(QUEUE_NS, "cbt.queue_ns")                                    \
    X(ENQUEUE_NS, "cbt.enqueue_ns")                                \
    X(GPU_QUEUE_NS, "cbt.gpu_queue_ns")                            \
    X(GPU_BUSY_NS, "cbt.gpu_busy_ns")                              \
    X(CBT_STREAM, "cbt.stream")                                    \
    X(CBT_DEVICE, "cbt.device")                                    \
    /* LMCache 0.5.7 (docs/lmcache-0.5.7.md): MP_LOOKUP_PREFETCH_END's   \
     * request-level keys, MP_LOOKUP's token_ids, the token-trace span */ \
    X(APC_COVERED_TOKENS, "apc_covered_tokens")                    \
    X(PROMPT_TOKENS, "prompt_tokens")                              \
    X(ENGINE_HIT_TOKENS, "engine_hit_tokens")                      \
    X(REQUEST_HIT_TOKENS, "request_hit_tokens")                    \
    X(ENGINE_HIT_RATE, "engine_hit_rate")                          \
    X(REQUEST_HIT_RATE, "request_hit_rate")                        \
    X(TOKEN_IDS, "token_ids")                                      \
    X(MP_REQUEST_TRACE, "mp.request.trace")                        \
    X(LMCACHE_MODEL, "lmcache.model")                              \
    X(LMCACHE_INPUT_IDS, "lmcache.input_ids")

enum {
    CBT_N_NONE_ = 0,
#define CBT_NAME_ENUM_(id, str) CBT_N_##id,
    CBT_WELL_KNOWN_NAMES(CBT_NAME_ENUM_)
#undef CBT_NAME_ENUM_
    CBT_N_WELL_KNOWN_COUNT_
};

/* The largest capacity (cbt_config.names_capacity, CBT_NAMES_CAPACITY): every
 * handle the built-in names leave. */
#define CBT_NAMES_CAPACITY_MAX (CBT_NAMES_MAX - ((unsigned)CBT_N_WELL_KNOWN_COUNT_ - 1u))

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the calls below compile to no-ops (see the top) ======== */
static inline cbt_status cbt_intern(const char *s, cbt_name *out)
{
    (void)s;
    if (out)
        *out = 0;
    return CBT_OK;
}
static inline const char *cbt_name_str(cbt_name n)
{
    (void)n;
    return "";
}
static inline uint32_t cbt_name_len(cbt_name n)
{
    (void)n;
    return 0;
}
#else /* the calls */

/* Intern `s` and store its handle in *out. Returns the same handle for equal
 * strings. Cost: a hash probe without a lock for a name already there (a
 * built-in one included); a new name takes a mutex, and every 1024th one
 * allocates 64 KiB. A new name refused by a full table takes no lock either
 * (so a refused key on a hot path costs a probe and an atomic add). Call
 * once, keep the handle. Never waits for anything but another thread's
 * insertion of a new name.
 * Errors, *out untouched: CBT_ERR_INVAL (NULL or empty), CBT_ERR_META_TOO_LONG
 * (longer than CBT_NAME_LEN_MAX - 1), CBT_ERR_FULL (a new name and the table
 * holds its capacity of a program's names: counted in
 * cbt_metrics.names_refused, cbt_last_error() names the capacity and how to
 * raise it), CBT_ERR_NOMEM. Thread-safe. */
CBT_API cbt_status cbt_intern(const char *s, cbt_name *out);

/* The string for a handle, or "" for 0 / unknown handles. Lock-free. */
CBT_API const char *cbt_name_str(cbt_name n);

/* Number of bytes of the name (without NUL); 0 for unknown handles. */
CBT_API uint32_t cbt_name_len(cbt_name n);

#endif /* CBT_DISABLE */

#ifdef __cplusplus
}
#endif
#endif /* CBT_NAMES_H */
