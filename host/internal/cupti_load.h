/* host/internal/cupti_load.h — what host/device/cupti_load.c (the CBT_CUPTI_DLOPEN
 * build: the Python package) says about the libcupti it opened: for its test
 * (tests/test_cupti_load.c) and for messages. Not in a build that links CUPTI. */
#ifndef CBT_INTERNAL_CUPTI_LOAD_H
#define CBT_INTERNAL_CUPTI_LOAD_H

/* The CUptiResult every forwarded call returns while libcupti could not be
 * opened; cuptiGetResultString turns it into the reason (cbt_cupti_load_error_). */
#define CBT_CUPTI_NOT_LOADED CUPTI_ERROR_NOT_INITIALIZED

/* Opens libcupti now if no call has tried yet (once per process; later calls
 * return the first answer): 1 when its entry points are all there, else 0.
 * The first try costs a dlopen (and, on a miss, a few); afterwards one load. */
int cbt_cupti_load_(void);

/* The path of the libcupti opened, or NULL when none could be (both try the
 * load first, as cbt_cupti_load_ does). */
const char *cbt_cupti_library_(void);

/* Why libcupti could not be opened, one line: what was tried and the way out
 * (CBT_CUPTI_LIBRARY); "" when it is open. */
const char *cbt_cupti_load_error_(void);

#endif
