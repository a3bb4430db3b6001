/* The one way every Check program in tests/unit runs its suite: fork mode unless CK_FORK=no
 * (the sanitizer run), exit status EXIT_FAILURE when any test failed. */
#ifndef SALUS_TESTS_UNIT_CHECK_RUN_H
#define SALUS_TESTS_UNIT_CHECK_RUN_H

#include <check.h>
#include <stdlib.h>

static inline int check_run_suite(Suite *suite)
{
    SRunner *runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
