/* host/core/tracer.c — owns the process-wide tracer: configuration, lifecycle
 * (it composes the components and registers the harvester's sources and
 * taps), the flush handshake's caller side, self-metrics.
 *
 * The only process-wide state of cbt besides the name tables is
 * cbt_active_tracer_, written by cbt_init/cbt_shutdown and read (acquire) by
 * every publish. A replay tracer (cbt_config.replay, cbt/replay.h) is the
 * same one tracer, but not active: publishes do not see it; the calls that
 * administer a tracer (subscribers, sinks, flush, metrics, stats) find it
 * through admin_tracer().
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cbt/blend_metrics.h"
#include "internal/arrays.h"
#include "internal/abi.h"
#include "internal/last_error.h"
#include "internal/names.h"
#include "internal/recorder.h"
#include "internal/tracer.h"
#include "internal/ring_host.h"

_Atomic(cbt_tracer *) cbt_active_tracer_ = NULL;

/* cbt_init/cbt_shutdown are serialised by this lock; publishers never take it. */
static pthread_mutex_t g_life_lock = PTHREAD_MUTEX_INITIALIZER;
static cbt_tracer *g_owned; /* the tracer cbt_init created (== active when enabled) */
static uint64_t g_next_gen = 1; /* tracer generations, under g_life_lock */
/* g_owned while it is a replay tracer (read without the lock, as the active
 * pointer is: the caller does not race cbt_shutdown with its own calls) */
static _Atomic(cbt_tracer *) g_replay;

/* Pins of the active tracer by cbt's own publishing threads (pin/unpin
 * below). Dekker with cbt_shutdown: a pin increments, then loads the active
 * tracer; shutdown stores NULL there, then waits for zero; both seq_cst, so
 * either the pin sees NULL or shutdown sees the pin. */
static _Atomic uint32_t g_pins;

cbt_tracer *cbt_tracer_pin_(void)
{
    atomic_fetch_add_explicit(&g_pins, 1, memory_order_seq_cst);
    cbt_tracer *t = atomic_load_explicit(&cbt_active_tracer_, memory_order_seq_cst);
    if (!t)
        atomic_fetch_sub_explicit(&g_pins, 1, memory_order_release);
    return t;
}

void cbt_tracer_unpin_(void) { atomic_fetch_sub_explicit(&g_pins, 1, memory_order_release); }

/* The tracer the administrative calls act on: the active one, else a replay
 * tracer. */
static cbt_tracer *admin_tracer(void)
{
    cbt_tracer *t = cbt_tracer_get();
    return t ? t : atomic_load_explicit(&g_replay, memory_order_acquire);
}

cbt_tracer *cbt_tracer_admin_(void) { return admin_tracer(); }

/* The tracer an administrative call acts on, held against cbt_shutdown
 * until admin_put: the active one pinned (cbt_shutdown waits for the pin:
 * a cbt_flush on another thread, at most its timeout; the others for a
 * copy), else a replay tracer (not pinned: its calls are its caller's).
 * So a flush, a metrics read or an add racing cbt_shutdown never touches a
 * freed tracer. */
static cbt_tracer *admin_get(int *pinned)
{
    cbt_tracer *t = cbt_tracer_pin_();
    *pinned = t != NULL;
    return t ? t : atomic_load_explicit(&g_replay, memory_order_acquire);
}

static void admin_put(int pinned)
{
    if (pinned)
        cbt_tracer_unpin_();
}

/* The fields cbt.h's inline cbt_config_default() asks for: at most the
 * caller's size (internal/abi.h). */
cbt_status cbt_config_default_into(cbt_config *out)
{
    cbt_config c;
    cbt_config_defaults_(&c); /* the one list of the defaults (cbt.h) */
    return cbt_abi_defaults_(out, &c, sizeof c);
}

static bool pow2(uint32_t v) { return v >= 2 && (v & (v - 1)) == 0; }

/* A config field broke a rule: the line on stderr (as always) and the
 * caller's detail (cbt_last_error, cbt_last_error_field). CBT_ERR_INVAL. */
__attribute__((format(printf, 2, 3))) static cbt_status bad_field(const char *field,
                                                                   const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cbt_last_error_vset_(field, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cbt: config: %s\n", cbt_last_error());
    return CBT_ERR_INVAL;
}

static cbt_status check_config(const cbt_config *c)
{
    /* capacities count 64-byte cells; the smallest holds the largest record */
    if (!pow2(c->queue_capacity) || c->queue_capacity < CBT_BUS_CELLS_MIN ||
        c->queue_capacity > (1u << 24))
        return bad_field("queue_capacity",
                         "queue_capacity %u (cells) must be a power of two in [%u, 2^24]",
                         c->queue_capacity, CBT_BUS_CELLS_MIN);
    if (c->lane_capacity != 0 && (!pow2(c->lane_capacity) || c->lane_capacity < CBT_BUS_CELLS_MIN ||
                                  c->lane_capacity > (1u << 22)))
        return bad_field("lane_capacity",
                         "lane_capacity %u (cells) must be 0 or a power of two in [%u, 2^22]",
                         c->lane_capacity, CBT_BUS_CELLS_MIN);
    if (c->max_lanes > CBT_MAX_LANES)
        return bad_field("max_lanes", "max_lanes %u must be at most %u", c->max_lanes,
                         CBT_MAX_LANES);
    if (c->lane_capacity &&
        (uint64_t)c->max_lanes * cbt_bus_bytes(c->lane_capacity, 1) > (1ull << 32)) {
        /* the lanes' address space, reserved at init: the product of two
         * fields; lane_capacity is the one that grows a lane past what
         * max_lanes of them allow (max_lanes alone stays under the bound
         * at the default lane_capacity) */
        uint64_t mib = (uint64_t)c->max_lanes * cbt_bus_bytes(c->lane_capacity, 1) >> 20;
        uint32_t fits = c->lane_capacity; /* the largest lane_capacity that would do */
        while (fits > CBT_BUS_CELLS_MIN &&
               (uint64_t)c->max_lanes * cbt_bus_bytes(fits, 1) > (1ull << 32))
            fits >>= 1;
        return bad_field("lane_capacity",
                         "lane_capacity %u cells x max_lanes %u is %llu MiB of lanes, more than "
                         "the 4096 MiB allowed: lower lane_capacity (at most %u with max_lanes "
                         "%u) or max_lanes",
                         c->lane_capacity, c->max_lanes, (unsigned long long)mib, fits,
                         c->max_lanes);
    }
    if (c->ring_capacity && (!pow2(c->ring_capacity) || c->ring_capacity > (1u << 24)))
        return bad_field("ring_capacity",
                         "ring_capacity %u must be 0 or a power of two in [2, 2^24]",
                         c->ring_capacity);
    if (c->cuda_ring_capacity &&
        (!pow2(c->cuda_ring_capacity) || c->cuda_ring_capacity > (1u << 24)))
        return bad_field("cuda_ring_capacity",
                         "cuda_ring_capacity %u must be 0 or a power of two in [2, 2^24]",
                         c->cuda_ring_capacity);
    if (c->ring_placement != CBT_RING_MAPPED && c->ring_placement != CBT_RING_DEVICE)
        return bad_field("ring_placement", "ring_placement %u is not a cbt_ring_placement",
                         c->ring_placement);
    if (c->span_pool == 0 || c->span_pool > 65535)
        return bad_field("span_pool", "span_pool %u must be in [1, 65535]", c->span_pool);
    if (!pow2(c->registry_capacity) || c->registry_capacity > (1u << 24))
        return bad_field("registry_capacity",
                         "registry_capacity %u must be a power of two in [2, 2^24]",
                         c->registry_capacity);
    if (c->max_sessions == 0 || c->max_sessions > (1u << 22))
        return bad_field("max_sessions", "max_sessions %u must be in [1, 2^22]", c->max_sessions);
    if (c->idle_sleep_ms == 0 || c->idle_sleep_ms > 60000)
        return bad_field("idle_sleep_ms", "idle_sleep_ms %u must be in [1, 60000]",
                         c->idle_sleep_ms);
    if (c->poll_interval_us == 0 || c->poll_interval_us > 1000000)
        return bad_field("poll_interval_us", "poll_interval_us %u must be in [1, 1000000]",
                         c->poll_interval_us);
    if (c->names_capacity > CBT_NAMES_CAPACITY_MAX)
        return bad_field("names_capacity", "names_capacity %u must be at most %u",
                         c->names_capacity, CBT_NAMES_CAPACITY_MAX);
    if (c->arrays_capacity &&
        (c->arrays_capacity < CBT_ARRAYS_CAPACITY_MIN || c->arrays_capacity > CBT_ARRAYS_CAPACITY_MAX))
        return bad_field("arrays_capacity", "arrays_capacity %llu bytes must be in [%llu, %llu]",
                         (unsigned long long)c->arrays_capacity,
                         (unsigned long long)CBT_ARRAYS_CAPACITY_MIN,
                         (unsigned long long)CBT_ARRAYS_CAPACITY_MAX);
    if (c->replay && c->trace_level)
        return bad_field("trace_level", "a replay tracer does not record (trace_level is set)");
    return CBT_OK;
}

/* The array store (cbt/array.h): the config's size, else CBT_ARRAYS_CAPACITY,
 * else the default; reserved once per process. */
static cbt_status arrays_reserve(const cbt_config *c)
{
    uint64_t bytes = c->arrays_capacity;
    const char *env = getenv("CBT_ARRAYS_CAPACITY");
    if (!bytes && env && *env) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(env, &end, 10);
        if (errno || !end || *end || env[0] == '-' || v < CBT_ARRAYS_CAPACITY_MIN ||
            v > CBT_ARRAYS_CAPACITY_MAX) {
            cbt_last_error_set_("arrays_capacity",
                                "CBT_ARRAYS_CAPACITY=%.64s: must be a number of bytes in [%llu, %llu]",
                                env, (unsigned long long)CBT_ARRAYS_CAPACITY_MIN,
                                (unsigned long long)CBT_ARRAYS_CAPACITY_MAX);
            fprintf(stderr, "cbt: config: %s\n", cbt_last_error());
            return CBT_ERR_INVAL;
        }
        bytes = v;
    }
    return cbt_arrays_reserve_(bytes ? bytes : CBT_ARRAYS_CAPACITY_DEFAULT);
}

static void tracer_free(cbt_tracer *t)
{
    if (!t)
        return;
    for (uint32_t i = 0; i < t->n_subs; i++)
        if (t->subs[i].destroy)
            t->subs[i].destroy(t->subs[i].ctx);
    cbt_sinks_destroy_(&t->sinks);
    cbt_lanes_free_(t);
    cbt_kspans_free_(t);
    cbt_recorder_close_(t->rec); /* an init that failed after opening it */
    t->rec = NULL;
    cbt_ring_destroy(t->host_ring);
    /* after a shutdown that gave up on pending marks, the device may be busy
     * for long: the CUDA ring's frees must not wait for it (ring.h) */
    cbt_ring_destroy_after_(t->cuda_ring, t->abandoned_marks);
    cbt_strtab_free(&t->reg);
    cbt_spans_free_(t);
    cbt_blend_metrics_free(t->blend); /* after the sinks: exporters read it last */
    cbt_bus_destroy(&t->bus);
    pthread_cond_destroy(&t->flush_cv);
    pthread_mutex_destroy(&t->flush_mu);
    pthread_mutex_destroy(&t->sub_lock);
    pthread_mutex_destroy(&t->streams_lock);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

cbt_status cbt_init(const cbt_config *cfg)
{
    /* an older caller's smaller config: the fields it does not know keep
     * their defaults (internal/abi.h) */
    cbt_last_error_clear_();
    cbt_config c = cbt_config_default();
    cbt_status st = cfg ? cbt_abi_in_(&c, sizeof c, cfg, CBT_CONFIG_VERSION) : CBT_OK;
    if (st == CBT_ERR_VERSION) {
        cbt_last_error_set_(NULL, "cbt_config version %u, size %u: this libcbt knows version "
                            "<= %u, size <= %zu (built against a newer cbt? start from "
                            "cbt_config_default())",
                            cfg->version, cfg->size, CBT_CONFIG_VERSION, sizeof c);
        fprintf(stderr, "cbt: config: %s\n", cbt_last_error());
        return st;
    }
    if (st || (st = check_config(&c)))
        return st;
    pthread_mutex_lock(&g_life_lock);
    if (g_owned) {
        pthread_mutex_unlock(&g_life_lock);
        return CBT_ERR_ALREADY;
    }
    if (c.names_capacity) /* process-wide, a disabled config's too: names outlive tracers */
        cbt_names_raise_capacity_(c.names_capacity);
    if (!c.enabled) {
        pthread_mutex_unlock(&g_life_lock);
        return CBT_OK;
    }
    if ((st = arrays_reserve(&c)) != CBT_OK) {
        pthread_mutex_unlock(&g_life_lock);
        return st;
    }
    cbt_tracer *t = calloc(1, sizeof *t);
    if (!t) {
        pthread_mutex_unlock(&g_life_lock);
        return CBT_ERR_NOMEM;
    }
    t->cfg = c;
    t->gen = g_next_gen++;
    {
        uint32_t used, cap;
        cbt_names_usage_(&used, &cap, &t->names_refused0);
    }
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->sub_lock, NULL);
    pthread_mutex_init(&t->streams_lock, NULL);
    pthread_mutex_init(&t->flush_mu, NULL);
    {
        pthread_condattr_t ca; /* cbt_flush's deadline is on the monotonic clock */
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&t->flush_cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    cbt_sinks_init_(&t->sinks, !c.replay, c.shutdown_timeout_ms);
    if ((st = cbt_bus_init(&t->bus, c.queue_capacity, 0)) ||
        (st = cbt_lanes_init_(t)) || (st = cbt_spans_init_(t, c.span_pool)) ||
        (st = cbt_blend_metrics_create(&t->blend)) ||
        (st = cbt_strtab_init(&t->reg, c.registry_capacity, c.registry_capacity - 1,
                              sizeof(cbt_span_ctx)))) {
        tracer_free(t);
        pthread_mutex_unlock(&g_life_lock);
        return st;
    }
    cbt_ids_seed(&t->ids);
    cbt_clock_map_init(&t->clock, 10);
    atomic_init(&t->next_launch_id, 1);
    if ((st = cbt_kspans_init_(t)) ||
        (c.ring_capacity &&
         (st = cbt_ring_create_host(c.ring_capacity, t->clock.ns_per_tick, &t->host_ring)))) {
        tracer_free(t);
        pthread_mutex_unlock(&g_life_lock);
        return st;
    }
    if (c.cuda_ring_capacity && c.replay) {
        /* a replay's device ring: only its clock line, set from the file */
        if (!(t->cuda_ring = calloc(1, sizeof *t->cuda_ring))) {
            tracer_free(t);
            pthread_mutex_unlock(&g_life_lock);
            return CBT_ERR_NOMEM;
        }
        t->cuda_ring->placement = CBT_RING_PLACE_HOST;
        cbt_devclock_init(&t->cuda_ring->clock, t->clock.ns_per_tick);
    } else if (c.cuda_ring_capacity) {
        st = cbt_ring_create_cuda(c.cuda_ring_capacity, (cbt_ring_placement)c.ring_placement,
                                  t->clock.ns_per_tick, &t->cuda_ring);
        if (st != CBT_OK && st != CBT_ERR_NO_DEVICE && st != CBT_ERR_UNSUPPORTED)
            fprintf(stderr, "cbt: no device ring (%s); kernel spans stay on the CPU backend\n",
                    cbt_strerror(st));
        st = CBT_OK;
    }
    {
        cbt_subscriber ps; /* spans opened by the process itself (cbt/pspan.h) */
        if ((st = cbt_pspan_subscriber_create_(&ps)) || (st = cbt_subscribers_add_(t, &ps))) {
            tracer_free(t);
            pthread_mutex_unlock(&g_life_lock);
            return st;
        }
    }
    if (c.mp_subscriber) {
        cbt_subscriber mp;
        cbt_tree_options to = {CBT_TREE_OPTIONS_VERSION, sizeof to, c.max_sessions,
                               c.mp_root_end, c.session_idle_ms, c.late_grace_ms,
                               CBT_TOKEN_TRACE_DEFAULT /* CBT_TOKEN_TRACE */};
        if ((st = cbt_mp_subscriber_create_opts(&to, &mp)) ||
            (st = cbt_subscribers_add_(t, &mp))) {
            tracer_free(t);
            pthread_mutex_unlock(&g_life_lock);
            return st;
        }
    }
    if (c.jsonl_path) {
        cbt_sink js; /* not CBT_SINK_NONBLOCKING: it writes from a sink thread */
        if ((st = cbt_jsonl_sink_create(c.jsonl_path, &js))) {
            /* sink_jsonl.c said why on stderr */
            tracer_free(t);
            pthread_mutex_unlock(&g_life_lock);
            return st;
        }
        if ((st = cbt_sinks_add_(&t->sinks, &js))) {
            if (js.destroy)
                js.destroy(js.ctx);
            tracer_free(t);
            pthread_mutex_unlock(&g_life_lock);
            return st;
        }
    }
    {
        /* what the harvester drives, in the order of each round */
        cbt_hv_source src;
        cbt_lanes_source_(t, &src);
        cbt_harvester_add_source_(t, &src);
        cbt_streams_source_(t, &src);
        cbt_harvester_add_source_(t, &src);
        cbt_kspans_source_(t, &src);
        cbt_harvester_add_source_(t, &src);
    }
    if (c.replay) {
        /* no harvester: cbt_replay_run is it, on the caller's thread */
        g_owned = t;
        atomic_store_explicit(&g_replay, t, memory_order_release);
        pthread_mutex_unlock(&g_life_lock);
        return CBT_OK;
    }
    if ((st = cbt_recorder_open_(&c, &t->rec_counts, &t->rec))) {
        tracer_free(t);
        pthread_mutex_unlock(&g_life_lock);
        return st;
    }
    if (t->rec) {
        cbt_hv_tap tap;
        cbt_recorder_tap_(t, &tap);
        cbt_harvester_add_tap_(t, &tap);
    }
    if (pthread_create(&t->harvester, NULL, cbt_harvester_main_, t) != 0) {
        tracer_free(t);
        pthread_mutex_unlock(&g_life_lock);
        return CBT_ERR_THREAD;
    }
    t->started = 1;
    g_owned = t;
    /* release: publishes the fully built tracer; pairs with the acquire in
     * cbt_publish / cbt_enabled */
    atomic_store_explicit(&cbt_active_tracer_, t, memory_order_release);
    pthread_mutex_unlock(&g_life_lock);
    return CBT_OK;
}

static void metrics_fill(cbt_tracer *t, cbt_metrics *out);

/* The tracer shutdown_tracer is stopping, and its thread, from the
 * harvester's stop to the sinks' stop: what a sink's last flush may read
 * (cbt_metrics_closing_). Only that thread reads it, and it clears it before
 * tracer_free. */
static cbt_tracer *g_closing;
static pthread_t g_closing_thread;
/* release after g_closing_thread is written; pairs with the acquire in
 * cbt_metrics_closing_, so a thread that sees 1 reads the thread id written */
static _Atomic int g_closing_set;

int cbt_shutdown_flushing_(void)
{
    return atomic_load_explicit(&g_closing_set, memory_order_acquire) &&
           pthread_equal(g_closing_thread, pthread_self());
}

cbt_status cbt_metrics_closing_(cbt_metrics *out)
{
    if (!out || !atomic_load_explicit(&g_closing_set, memory_order_acquire) ||
        !pthread_equal(g_closing_thread, pthread_self()))
        return CBT_ERR_NOT_INITIALIZED;
    metrics_fill(g_closing, out);
    return CBT_OK;
}

/* cbt_shutdown and cbt_shutdown_final: with `final` set, the metrics once
 * the harvester has stopped (its stop path ended the open spans and flushed
 * every sink for the last time) and before tracer_free destroys the sinks,
 * so their spans_lost is the final count. */
static cbt_status shutdown_tracer(cbt_metrics *final)
{
    pthread_mutex_lock(&g_life_lock);
    cbt_tracer *t = g_owned;
    if (!t) {
        pthread_mutex_unlock(&g_life_lock);
        return final ? CBT_ERR_NOT_INITIALIZED : CBT_OK;
    }
    atomic_store_explicit(&cbt_active_tracer_, NULL, memory_order_seq_cst);
    /* a cbt_flush on another thread stops waiting (this shutdown flushes
     * everything), on the harvester and on a sink thread */
    pthread_mutex_lock(&t->flush_mu);
    atomic_store_explicit(&t->closing, 1, memory_order_relaxed);
    pthread_cond_broadcast(&t->flush_cv);
    pthread_mutex_unlock(&t->flush_mu);
    cbt_sinks_flush_abort_(&t->sinks, 1);
    /* a CPU stream worker that pinned it before the store finishes its one
     * push (microseconds), an administrative call its work (a flush: at most
     * its own bound, or a non-blocking sink's export timeout if smaller);
     * none can pin it after */
    while (atomic_load_explicit(&g_pins, memory_order_seq_cst) != 0) {
        struct timespec d = {0, 20000};
        nanosleep(&d, NULL);
    }
    cbt_sinks_flush_abort_(&t->sinks, 0);
    atomic_store_explicit(&t->stop, 1, memory_order_release);
    cbt_harvester_kick_(t); /* it may sleep (harvester.c, "Sleeping") */
    if (t->started)
        pthread_join(t->harvester, NULL);
    if (t->cfg.replay) { /* the stop path a harvester would run, unless the file's shutdown did */
        pthread_mutex_lock(&t->lock);
        cbt_harvester_finish_(t);
        pthread_mutex_unlock(&t->lock);
        atomic_store_explicit(&g_replay, NULL, memory_order_release);
    }
    /* the sinks' last flush and stop, within shutdown_timeout_ms together;
     * a sink thread still busy then is abandoned (internal/sinks.h). A
     * sink's last flush may read this tracer's metrics on this thread
     * (cbt_metrics_closing_, internal/publish_hook.h). */
    g_closing = t;
    g_closing_thread = pthread_self();
    atomic_store_explicit(&g_closing_set, 1, memory_order_release);
    uint64_t sinks_deadline = cbt_clock_mono_ns() + (uint64_t)t->cfg.shutdown_timeout_ms * 1000000ull;
    cbt_sinks_stop_post_(&t->sinks); /* the sink threads finish meanwhile */
    (void)cbt_sinks_flush_(&t->sinks, sinks_deadline);
    cbt_sinks_stop_(&t->sinks, sinks_deadline);
    atomic_store_explicit(&g_closing_set, 0, memory_order_relaxed);
    g_closing = NULL;
    cbt_recorder_close_(t->rec); /* everything the harvester recorded, written */
    t->rec = NULL;
    if (final)
        metrics_fill(t, final);
    g_owned = NULL;
    tracer_free(t);
    pthread_mutex_unlock(&g_life_lock);
    return CBT_OK;
}

cbt_status cbt_shutdown(void) { return shutdown_tracer(NULL); }

cbt_status cbt_shutdown_final(cbt_metrics *caller)
{
    if (!caller)
        return shutdown_tracer(NULL);
    cbt_status st = cbt_abi_out_check_(caller);
    if (st)
        return st; /* refused before anything is stopped */
    cbt_metrics full;
    if ((st = shutdown_tracer(&full)))
        return st;
    cbt_abi_out_(caller, &full, sizeof full, CBT_METRICS_VERSION);
    return CBT_OK;
}

cbt_tracer *cbt_tracer_get(void)
{
    return atomic_load_explicit(&cbt_active_tracer_, memory_order_acquire);
}

uint64_t cbt_tracer_generation_(const cbt_tracer *t) { return t->gen; }

cbt_status cbt_publish_hook_install_(cbt_tracer *t, cbt_publish_hook fn, void *ctx)
{
    if (!t || !fn)
        return CBT_ERR_INVAL;
    if (t->publish_hook)
        return CBT_ERR_ALREADY;
    t->publish_hook_ctx = ctx;
    t->publish_hook = fn;
    return CBT_OK;
}

cbt_status cbt_add_subscriber(const cbt_subscriber *sub)
{
    int pinned;
    cbt_tracer *t = admin_get(&pinned);
    if (!t)
        return CBT_ERR_NOT_INITIALIZED;
    cbt_status st = cbt_subscribers_add_(t, sub);
    admin_put(pinned);
    return st;
}

cbt_status cbt_add_sink(const cbt_sink *sink)
{
    int pinned;
    cbt_tracer *t = admin_get(&pinned);
    if (!t)
        return CBT_ERR_NOT_INITIALIZED;
    cbt_status st = cbt_sinks_add_(&t->sinks, sink);
    admin_put(pinned);
    return st;
}

/* Two steps, both bounded by the one deadline: the harvester dispatches
 * everything stamped before the call (it completes the request after a
 * round that began later and left nothing behind: harvester.c, "Flush"),
 * then the sinks flush what they were handed (cbt_sinks_flush_: a sink
 * thread's flush waits for that thread at most the time left). Neither
 * waits on a lock that slow work holds. */
static cbt_status flush_tracer(cbt_tracer *t, uint32_t timeout_ms);

cbt_status cbt_flush(uint32_t timeout_ms)
{
    int pinned;
    cbt_tracer *t = admin_get(&pinned);
    if (!t)
        return CBT_ERR_NOT_INITIALIZED;
    cbt_status st = flush_tracer(t, timeout_ms);
    admin_put(pinned);
    return st;
}

static cbt_status flush_tracer(cbt_tracer *t, uint32_t timeout_ms)
{
    uint64_t deadline = cbt_clock_mono_ns() + (uint64_t)timeout_ms * 1000000ull;
    if (!t->cfg.replay) {
        pthread_mutex_lock(&t->flush_mu);
        /* everything this thread published (and every stream it synced) was
         * stamped before now */
        t->flush_ticks = cbt_clock_ticks_ordered();
        uint64_t mine = ++t->flush_req;
        pthread_mutex_unlock(&t->flush_mu);
        cbt_harvester_kick_(t); /* it may nap or sleep */
        struct timespec dl = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
        pthread_mutex_lock(&t->flush_mu);
        int closing = 0;
        while (t->flush_done < mine &&
               !(closing = atomic_load_explicit(&t->closing, memory_order_relaxed)) &&
               pthread_cond_timedwait(&t->flush_cv, &t->flush_mu, &dl) != ETIMEDOUT) {
        }
        int done = t->flush_done >= mine;
        closing = atomic_load_explicit(&t->closing, memory_order_relaxed);
        pthread_mutex_unlock(&t->flush_mu);
        if (closing)
            return CBT_OK; /* cbt_shutdown began: it flushes everything */
        if (!done)
            return CBT_ERR_TIMEOUT;
        cbt_status st = cbt_sinks_flush_(&t->sinks, deadline);
        return st == CBT_ERR_TIMEOUT ? CBT_ERR_TIMEOUT : CBT_OK; /* a sink's failure is counted */
    }
    /* a replay has no harvester: everything replayed is dispatched already;
     * its sinks are called under the lock a replay's batch holds */
    pthread_mutex_lock(&t->lock);
    cbt_status st = cbt_sinks_flush_(&t->sinks, deadline);
    pthread_mutex_unlock(&t->lock);
    return st == CBT_ERR_TIMEOUT ? CBT_ERR_TIMEOUT : CBT_OK;
}

cbt_status cbt_publish_checked(const cbt_event *ev)
{
    cbt_tracer *t = cbt_tracer_get();
    if (!t)
        return CBT_OK;
    return cbt_tracer_publish(t, ev);
}

void cbt_lane_orphan_(uint64_t gen, cbt_lane *lane)
{
    /* a pin keeps the tracer (and so the lane) alive while we look, and
     * never waits: a thread's exit does not wait for a shutdown in progress
     * (a tracer shutting down frees the lane with the rest); release: our
     * pushes happen before the harvester frees the lane */
    cbt_tracer *t = cbt_tracer_pin_();
    if (!t)
        return;
    if (t->gen == gen)
        atomic_store_explicit(&lane->state, CBT_LANE_ORPHANED, memory_order_release);
    cbt_tracer_unpin_();
}

void cbt_count_session_too_long_(void)
{
    cbt_tracer *t = cbt_tracer_get();
    if (t)
        atomic_fetch_add_explicit(&t->session_too_long, 1, memory_order_relaxed);
}

void cbt_count_meta_truncated_(void)
{
    cbt_tracer *t = cbt_tracer_get();
    if (t)
        atomic_fetch_add_explicit(&t->meta_truncated, 1, memory_order_relaxed);
}

/* The self-metrics of `t` as of now (cbt_metrics_get, cbt_shutdown_final). */
static void metrics_fill(cbt_tracer *t, cbt_metrics *out)
{
    memset(out, 0, sizeof *out);
#define R(x) atomic_load_explicit(&(x), memory_order_relaxed)
    /* no lock: counters, the fixed lane pool, the append-only sink list */
    out->sink_spans_lost = cbt_sinks_lost_(&t->sinks);
    out->published = cbt_bus_accepted(&t->bus);
    out->dropped_full = R(t->bus.dropped);
    out->queue_depth = cbt_bus_depth(&t->bus);
    for (uint32_t i = 0; i < t->n_pool; i++) {
        out->published += cbt_bus_accepted(&t->lane_pool[i].bus);
        out->dropped_full += R(t->lane_pool[i].bus.dropped);
        out->queue_depth += cbt_bus_depth(&t->lane_pool[i].bus);
    }
    out->lanes = cbt_lanes_in_use_(t);
    out->rejected = R(t->rejected);
    out->session_too_long = R(t->session_too_long);
    out->meta_truncated = R(t->meta_truncated);
    out->dispatched = R(t->dispatched);
    out->subscriber_errors = R(t->subscriber_errors);
    out->sink_errors = cbt_sinks_errors_(&t->sinks);
    out->queue_capacity = t->bus.mask + 1;
    out->pending_stream_marks = R(t->pending_marks);
    out->stream_marks_dropped = R(t->stream_marks_dropped);
    out->lag_last_ns = R(t->lag_last_ns);
    out->lag_max_ns = R(t->lag_max_ns);
    out->spans_started = R(t->spans_started);
    out->spans_ended = R(t->spans_ended);
    out->spans_dropped = R(t->spans_dropped);
    out->spans_unsampled = R(t->spans_unsampled);
    out->spans_open = out->spans_started - out->spans_ended;
    out->registry_full = R(t->registry_full);
    out->harvester_busy_ns = R(t->busy_ns);
    out->harvester_wakeups = R(t->hv_wakeups);
    out->trace_records = R(t->rec_counts.records);
    out->trace_records_dropped = R(t->rec_counts.dropped);
    out->trace_bytes = R(t->rec_counts.bytes);
    out->trace_write_errors = R(t->rec_counts.write_errors);
    {
        uint32_t used, cap;
        uint64_t refused;
        cbt_names_usage_(&used, &cap, &refused);
        out->names_used = used;
        out->names_capacity = cap;
        cbt_arrays_stats as;
        cbt_arrays_stats_get(&as);
        out->arrays_capacity = as.capacity;
        out->arrays_used = as.used;
        out->arrays_stored = as.stored;
        out->arrays_dropped = as.dropped;
        out->names_refused = refused - t->names_refused0;
    }
#undef R
}

cbt_status cbt_metrics_get(cbt_metrics *caller)
{
    cbt_status st = cbt_abi_out_check_(caller);
    if (st)
        return st;
    int pinned;
    cbt_tracer *t = admin_get(&pinned);
    if (!t)
        return CBT_ERR_NOT_INITIALIZED;
    cbt_metrics full;
    metrics_fill(t, &full);
    admin_put(pinned);
    cbt_abi_out_(caller, &full, sizeof full, CBT_METRICS_VERSION);
    return CBT_OK;
}

cbt_status cbt_tracer_add_stream_(cbt_tracer *t, struct cbt_stream *s)
{
    pthread_mutex_lock(&t->streams_lock);
    cbt_status st = CBT_OK;
    if (t->n_streams >= CBT_MAX_CUDA_STREAMS)
        st = CBT_ERR_FULL;
    else
        t->streams[t->n_streams++] = s;
    pthread_mutex_unlock(&t->streams_lock);
    return st;
}

int cbt_tracer_detach_stream_(uint64_t gen, struct cbt_stream *s, _Atomic uint32_t *in_flight)
{
    pthread_mutex_lock(&g_life_lock);
    cbt_tracer *t = g_owned;
    if (!t || t->gen != gen) {
        /* that tracer is gone, and its lanes with every mark of ours */
        pthread_mutex_unlock(&g_life_lock);
        return 1;
    }
    uint64_t deadline = cbt_clock_unix_now() + (uint64_t)t->cfg.shutdown_timeout_ms * 1000000ull;
    while (atomic_load_explicit(in_flight, memory_order_acquire) != 0 &&
           cbt_clock_unix_now() < deadline) {
        struct timespec d = {0, 100000};
        nanosleep(&d, NULL);
    }
    int done = atomic_load_explicit(in_flight, memory_order_acquire) == 0;
    if (done) {
        pthread_mutex_lock(&t->streams_lock);
        for (uint32_t i = 0; i < t->n_streams; i++) {
            if (t->streams[i] == s) {
                t->streams[i] = t->streams[--t->n_streams];
                break;
            }
        }
        pthread_mutex_unlock(&t->streams_lock);
    }
    pthread_mutex_unlock(&g_life_lock);
    return done;
}

cbt_status cbt_find_subscriber_ctx_(const cbt_subscriber *sub,
                                    cbt_status (*fn)(void *, cbt_tracer *, const cbt_event *),
                                    void **ctx_out)
{
    return cbt_find_subscriber_named_(sub, fn, NULL, ctx_out);
}

cbt_status cbt_find_subscriber_named_(const cbt_subscriber *sub,
                                      cbt_status (*fn)(void *, cbt_tracer *, const cbt_event *),
                                      const char *name, void **ctx_out)
{
    if (sub) {
        if (sub->on_event != fn || !sub->ctx || (name && sub->name != name)) /* not ours, or a hand-made copy */
            return CBT_ERR_INVAL;
        *ctx_out = sub->ctx;
        return CBT_OK;
    }
    cbt_tracer *t = admin_tracer();
    if (!t)
        return CBT_ERR_NOT_INITIALIZED;
    void *found = NULL;
    uint32_t n = cbt_subscribers_n_(t); /* append-only: no lock */
    for (uint32_t i = 0; i < n && !found; i++)
        if (t->subs[i].on_event == fn && (!name || t->subs[i].name == name))
            found = t->subs[i].ctx;
    *ctx_out = found;
    return found ? CBT_OK : CBT_ERR_NOT_FOUND;
}
