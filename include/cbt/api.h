/* cbt/api.h — what every public cbt header uses to declare its ABI: which
 * symbols libcbt exports, and the layout rule of the versioned structs.
 *
 * CBT_API marks each out-of-line public function (and the one exported
 * variable, cbt_active_tracer_). libcbt and libcbt_kernels are compiled with
 * hidden visibility, so what is not marked stays inside the library: the
 * shared libraries export the public API and nothing else (their internals,
 * and the protobuf-c code libcbt carries, stay reachable from the static
 * libraries only). With a compiler that knows no visibility attribute it is
 * empty.
 *
 * CBT_ASSERT_NO_TAIL_PADDING_(type, last) follows every versioned struct
 * (cbt.h, "versioned structs"): sizeof(type) must be the end of its last
 * field, so that a field appended later always changes sizeof, the `size`
 * callers send. A struct whose last field would leave padding ends with an
 * explicit reserved field instead.
 *
 * CBT_DISABLE changes nothing here: these are declarations, not calls.
 */
#ifndef CBT_API_H
#define CBT_API_H

#include <stddef.h>

#if defined(__GNUC__) || defined(__clang__)
#define CBT_API __attribute__((visibility("default")))
#else
#define CBT_API
#endif

#ifdef __cplusplus
#define CBT_ASSERT_NO_TAIL_PADDING_(type, last)                                      \
    static_assert(sizeof(type) == offsetof(type, last) + sizeof(((type *)0)->last), \
                  #type " has tail padding: end it with a reserved field (cbt.h)")
#else
#define CBT_ASSERT_NO_TAIL_PADDING_(type, last)                                      \
    _Static_assert(sizeof(type) == offsetof(type, last) + sizeof(((type *)0)->last), \
                   #type " has tail padding: end it with a reserved field (cbt.h)")
#endif

#endif /* CBT_API_H */
