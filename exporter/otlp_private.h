/* exporter/otlp_private.h — what the OTLP files share and users need not see. */
#ifndef CBT_EXPORTER_OTLP_PRIVATE_H
#define CBT_EXPORTER_OTLP_PRIVATE_H

#include "cbt/status.h"

/* 1 for an http:// or https:// URL with a non-empty host and no whitespace or
 * control characters (otlp_env.c). The environment parser and the exporter's
 * own config check use the same rule. */
int cbt_otlp_url_ok(const char *u);

/* A caller's config made complete (host/internal/abi.h): `full` gets the
 * defaults, then the caller's first c->size bytes. CBT_ERR_INVAL for NULL,
 * CBT_ERR_VERSION (said on stderr) for a size or version this libcbt does
 * not know (otlp_env.c). */
struct cbt_otlp_config;
cbt_status cbt_otlp_config_in_(struct cbt_otlp_config *full, const struct cbt_otlp_config *c);

#endif /* CBT_EXPORTER_OTLP_PRIVATE_H */
