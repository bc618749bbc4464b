/* tests/test_cupti_load.c — host/device/cupti_load.c, the CUPTI reached by dlopen
 * (the Python package's build, CBT_CUPTI_DLOPEN): with no libcupti every
 * forwarded call returns CBT_CUPTI_NOT_LOADED and cuptiGetResultString says
 * why, naming what was tried; a library without CUPTI's entry points is
 * refused by name; the real libcupti (when the toolkit has one,
 * CBT_TEST_CUPTI_PATH) is opened and its own strings come back. No device is
 * needed; the test links no libcbt and no libcupti. The loader decides once per process, so each case runs in a
 * forked child with its own environment. */
#include <cupti.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "internal/cupti_load.h"

/* runs fn in a child with CBT_CUPTI_LIBRARY = lib (unset when NULL); the
 * child's checks print what failed and exit 1 */
static void in_child(const char *lib, int (*fn)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (lib)
            setenv("CBT_CUPTI_LIBRARY", lib, 1);
        else
            unsetenv("CBT_CUPTI_LIBRARY");
        int rc = fn();
        fflush(stdout);
        _exit(rc);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            printf("FAILED (line %d): %s\n", __LINE__, #c);                                       \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static int not_loaded_says_why(const char *must_contain)
{
    uint64_t ts = 0;
    CHECK(cuptiGetTimestamp(&ts) == CBT_CUPTI_NOT_LOADED);
    CHECK(cuptiActivityFlushAll(0) == CBT_CUPTI_NOT_LOADED);
    CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CBT_CUPTI_NOT_LOADED);
    const char *s = NULL;
    CHECK(cuptiGetResultString(CBT_CUPTI_NOT_LOADED, &s) == CUPTI_SUCCESS);
    CHECK(s != NULL);
    printf("# not loaded: %s\n", s);
    CHECK(strstr(s, must_contain) != NULL);
    CHECK(strcmp(s, cbt_cupti_load_error_()) == 0);
    CHECK(cbt_cupti_library_() == NULL);
    CHECK(cbt_cupti_load_() == 0);
    /* another code: a sentence, never NULL */
    s = NULL;
    CHECK(cuptiGetResultString(CUPTI_ERROR_UNKNOWN, &s) == CUPTI_SUCCESS && s && s[0]);
    CHECK(cuptiGetResultString(CBT_CUPTI_NOT_LOADED, NULL) == CUPTI_ERROR_INVALID_PARAMETER);
    return 0;
}

static int missing_file(void) { return not_loaded_says_why("CBT_CUPTI_LIBRARY=/nonexistent/"); }

static void explicit_path_missing(void **state)
{
    (void)state;
    in_child("/nonexistent/libcupti.so", missing_file);
}

static int not_cupti(void) { return not_loaded_says_why("has no cupti"); }

/* a real library that is not CUPTI: refused by the entry point it lacks */
static void explicit_path_not_cupti(void **state)
{
    (void)state;
    in_child("libm.so.6", not_cupti);
}

static int real_cupti(void)
{
    CHECK(cbt_cupti_load_() == 1);
    const char *path = cbt_cupti_library_();
    CHECK(path != NULL);
    printf("# loaded %s\n", path);
    CHECK(strstr(path, "libcupti") != NULL);
    CHECK(strcmp(cbt_cupti_load_error_(), "") == 0);
    const char *s = NULL; /* CUPTI's own text now */
    CHECK(cuptiGetResultString(CUPTI_ERROR_INVALID_PARAMETER, &s) == CUPTI_SUCCESS);
    CHECK(s && strstr(s, "INVALID_PARAMETER"));
    return 0;
}

static void explicit_path_real_cupti(void **state)
{
    (void)state;
#ifdef CBT_TEST_CUPTI_PATH
    in_child(CBT_TEST_CUPTI_PATH, real_cupti);
#else
    (void)real_cupti;
    printf("SKIP: test_cupti_load: explicit_path_real_cupti: the CUDA toolkit has no libcupti "
           "here (CUDA_cupti_LIBRARY)\n");
    skip();
#endif
}

static int searched(void)
{
    unsetenv("LD_LIBRARY_PATH"); /* read at startup anyway: the cache and the toolkit dirs */
    if (cbt_cupti_load_()) {
        printf("# found by the search: %s\n", cbt_cupti_library_());
        return real_cupti();
    }
    /* not found: the reason names the search and the way out */
    return not_loaded_says_why("set CBT_CUPTI_LIBRARY");
}

/* no CBT_CUPTI_LIBRARY: the loader's search (its result depends on the machine) */
static void search_without_env(void **state)
{
    (void)state;
    in_child(NULL, searched);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(explicit_path_missing),
        cmocka_unit_test(explicit_path_not_cupti),
        cmocka_unit_test(explicit_path_real_cupti),
        cmocka_unit_test(search_without_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
