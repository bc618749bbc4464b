/* tests/abi_old_caller.h — abi_old_caller.c, a program built against the cbt
 * headers from before the inline producers (test_abi.c runs it). */
#ifndef CBT_TESTS_ABI_OLD_CALLER_H
#define CBT_TESTS_ABI_OLD_CALLER_H

/* Call each out-of-line symbol such a program calls, with version 1 structs
 * in poisoned buffers, and assert (cmocka) that none writes past them. */
void abi_old_caller_checks(void);

#endif /* CBT_TESTS_ABI_OLD_CALLER_H */
