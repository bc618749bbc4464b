/* host/internal/names.h — what the tracer asks of the name table
 * (host/core/names.c) besides the public calls of cbt/names.h. */
#ifndef CBT_HOST_INTERNAL_NAMES_H
#define CBT_HOST_INTERNAL_NAMES_H

#include <stdint.h>

/* Raise the capacity for a program's names to `capacity` (<=
 * CBT_NAMES_CAPACITY_MAX, checked by the caller); a lower one changes
 * nothing: names are never freed. */
void cbt_names_raise_capacity_(uint32_t capacity);

/* A program's names in the table now, the capacity, and cbt_intern calls
 * refused since the process started (relaxed reads). */
void cbt_names_usage_(uint32_t *used, uint32_t *capacity, uint64_t *refused);

/* Take (1) or release (0) the table's insertion mutex from outside: for
 * tests/test_names.c, which checks that a full table refuses without it. */
void cbt_names_hold_lock_(int hold);

#endif /* CBT_HOST_INTERNAL_NAMES_H */
