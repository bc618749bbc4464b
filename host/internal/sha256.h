/* host/internal/sha256.h — SHA-256 (host/util/sha256.c): the LMCT header's
 * configuration digest (LMCache's sm_config_digest rule). No cbt state. */
#ifndef CBT_HOST_INTERNAL_SHA256_H
#define CBT_HOST_INTERNAL_SHA256_H

#include <stddef.h>

/* SHA-256 of n bytes as 64 lowercase hex digits and a NUL. Pure, any thread. */
void cbt_sha256_hex_(const void *data, size_t n, char out[65]);

#endif /* CBT_HOST_INTERNAL_SHA256_H */
