/* exporter/otlp_private.h — what the OTLP files share and users need not see. */
#ifndef CBT_EXPORTER_OTLP_PRIVATE_H
#define CBT_EXPORTER_OTLP_PRIVATE_H

/* 1 for an http:// or https:// URL with a non-empty host and no whitespace or
 * control characters (otlp_env.c). The environment parser and the exporter's
 * own config check use the same rule. */
int cbt_otlp_url_ok(const char *u);

#endif /* CBT_EXPORTER_OTLP_PRIVATE_H */
