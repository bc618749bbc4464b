/* tests/cuda_double/cudadbl_internal.h — what the double's runtime part
 * (cudart_double.c) and its kernel part (launch_double.c) share: a stream
 * is a host thread slot for the kernel running on it. */
#ifndef CBT_TESTS_CUDADBL_INTERNAL_H
#define CBT_TESTS_CUDADBL_INTERNAL_H

#include <cuda_runtime_api.h>

cudaStream_t cudadbl_stream_new_(void);
/* Wait for the kernel running on `s` (NULL: the default stream, none). */
void cudadbl_stream_join_(cudaStream_t s);
void cudadbl_stream_free_(cudaStream_t s);
void cudadbl_launch_reset_(void);

#endif /* CBT_TESTS_CUDADBL_INTERNAL_H */
