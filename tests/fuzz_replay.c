/* tests/fuzz_replay.c — libFuzzer target: a whole replay (host/record/replay.c)
 * of arbitrary bytes as a recording, forced past every mismatch so fuzzed
 * records reach the builders: open, the replay tracer, the builders, every
 * record, shutdown. Any status is fine; a crash, a leak, a sanitizer report
 * or a hang is a finding. scripts/fuzz.sh seeds it with a real recording. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cbt.h"
#include "cbt/replay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A fuzzed configuration may ask for builders of 4 M sessions each, which a
 * user may choose but a fuzzer's memory limit cannot hold: those inputs are
 * left out (the pools cbt_init makes are capped below instead). */
static int small_builders(const char *json)
{
    for (const char *p = json; (p = strstr(p, "\"max_sessions\":")) != NULL; p++)
        if (strtoul(p + 15, NULL, 10) > 4096)
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("replay", 0);
    if (fd < 0)
        return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    FILE *devnull = fopen("/dev/null", "w");
    cbt_replay_options o = cbt_replay_options_default();
    o.force = true;
    o.log = devnull;
    cbt_replay *r = NULL;
    if (cbt_replay_open(path, &o, &r) == CBT_OK && small_builders(cbt_replay_header_json(r))) {
        cbt_config c = cbt_config_default();
        if (cbt_replay_config(r, &c) == CBT_OK) {
            /* small pools: the fuzzer runs many replays (the configuration
             * check then says mismatch, and force goes on) */
            c.span_pool = c.span_pool > 1024 ? 1024 : c.span_pool;
            c.registry_capacity = c.registry_capacity > 4096 ? 4096 : c.registry_capacity;
            if (c.max_sessions > 1024)
                c.max_sessions = 1024;
            if (cbt_init(&c) == CBT_OK) {
                (void)cbt_replay_add_builders(r);
                cbt_replay_stats st = CBT_STRUCT_INIT(cbt_replay_stats);
                (void)cbt_replay_run(r, &st);
                if (st.events + st.ring_records + st.clock_records > st.records)
                    abort(); /* applied more records than were read */
            }
            cbt_shutdown();
        }
    }
    cbt_replay_close(r);
    if (devnull)
        fclose(devnull);
    close(fd);
    return 0;
}
