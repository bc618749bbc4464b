/* tests/nvtx_inject.h — owns the record format of the test NVTX tool
 * (nvtx_inject.c): what an injection library loaded through
 * NVTX_INJECTION64_PATH saw the program call, for test_nvtx.c to inspect.
 *
 * The library is dlopen'ed by NVTX itself on the program's first NVTX call;
 * the test reaches the log with dlopen(path, RTLD_NOLOAD) + dlsym
 * ("cbt_nvtx_log"). Needs no NVTX header. Records are appended under a
 * mutex and never removed; read them once the publishing threads are done.
 */
#ifndef CBT_TESTS_NVTX_INJECT_H
#define CBT_TESTS_NVTX_INJECT_H

#include <stdint.h>

#define NVTX_LOG_DOMAINS 16
#define NVTX_LOG_STRINGS 512
#define NVTX_LOG_CATEGORIES 64
#define NVTX_LOG_RANGES 16384
#define NVTX_LOG_MARKS 4096
#define NVTX_LOG_TEXT 160
#define NVTX_LOG_RANGE_ID_BASE 0x100000ull /* first id handed out */

typedef struct nvtx_log_domain {
    const void *handle;
    char name[NVTX_LOG_TEXT];
} nvtx_log_domain;

typedef struct nvtx_log_string {
    const void *handle;
    const void *domain;
    char text[NVTX_LOG_TEXT];
} nvtx_log_string;

typedef struct nvtx_log_category {
    const void *domain;
    uint32_t id;
    char name[NVTX_LOG_TEXT];
} nvtx_log_category;

/* One nvtxDomainRangeStartEx, and its nvtxDomainRangeEnd when ended. */
typedef struct nvtx_log_range {
    uint64_t id; /* what the tool returned */
    const void *domain;
    uint32_t category;
    int32_t message_type; /* nvtxMessageType_t */
    int32_t payload_type; /* nvtxPayloadType_t */
    uint64_t payload;     /* payload.ullValue */
    char message[NVTX_LOG_TEXT]; /* ascii, or the registered string's text */
    uint64_t start_tid, end_tid; /* gettid() of the calling threads */
    uint64_t start_seq, end_seq; /* global call order; end_seq 0: not ended */
    int ended;
} nvtx_log_range;

typedef struct nvtx_log_mark {
    const void *domain;
    uint32_t category;
    int32_t message_type;
    char message[NVTX_LOG_TEXT];
    uint64_t tid, seq;
} nvtx_log_mark;

typedef struct nvtx_log {
    int initialized; /* InitializeInjectionNvtx2 ran */
    uint64_t seq;    /* calls recorded so far (all kinds) */
    uint32_t n_domains, n_strings, n_categories, n_ranges, n_marks;
    uint32_t n_bad_ends;   /* RangeEnd with an id never started, or ended twice */
    uint32_t n_overflow;   /* records that did not fit */
    nvtx_log_domain domains[NVTX_LOG_DOMAINS];
    nvtx_log_string strings[NVTX_LOG_STRINGS];
    nvtx_log_category categories[NVTX_LOG_CATEGORIES];
    nvtx_log_range ranges[NVTX_LOG_RANGES];
    nvtx_log_mark marks[NVTX_LOG_MARKS];
} nvtx_log;

/* Exported by the injection library. */
const nvtx_log *cbt_nvtx_log(void);
typedef const nvtx_log *(*cbt_nvtx_log_fn)(void);
/* The next range start, mark or string registration whose text (message,
 * or the string) contains `needle` sleeps `ms` first, outside the tool's
 * lock: a slow tool for one thread. Once per call of this. */
void cbt_nvtx_inject_stall(const char *needle, unsigned ms);
typedef void (*cbt_nvtx_inject_stall_fn)(const char *needle, unsigned ms);
/* 1 while a call sleeps in that stall. */
int cbt_nvtx_inject_stalling(void);
typedef int (*cbt_nvtx_inject_stalling_fn)(void);

#endif /* CBT_TESTS_NVTX_INJECT_H */
