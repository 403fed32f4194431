/* The main of a unit-test program: the test functions, listed once, run in order by cmocka.
 *
 *   SPW_TEST_MAIN(test_a, test_b)                       each test alone
 *   SPW_TEST_MAIN_EACH(setup, teardown, test_a, ...)    each test between setup and teardown
 *   SPW_TEST_MAIN_GROUP(setup, teardown, test_a, ...)   setup once before all, teardown after
 *
 * Each test keeps its own name in cmocka's output (the list is also stringified and split at its
 * commas). Include it after cmocka.h's prerequisites; only test programs include it. */
#ifndef SPARROW_TEST_MAIN_H
#define SPARROW_TEST_MAIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs fns[0..n) named by the comma-separated list names, each between each_setup and
 * each_teardown (may be NULL), inside group_setup and group_teardown (may be NULL). Returns
 * cmocka's exit status. */
static inline int spw_test_run(const char *names, const CMUnitTestFunction *fns, size_t n,
                               CMFixtureFunction each_setup, CMFixtureFunction each_teardown,
                               CMFixtureFunction group_setup, CMFixtureFunction group_teardown)
{
    struct CMUnitTest *tests = calloc(n, sizeof(*tests));
    char *list = strdup(names);
    if (!tests || !list) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    char *next = list;
    for (size_t i = 0; i < n; i++) {
        while (isspace((unsigned char)*next))
            next++;
        char *name = next;
        next += strcspn(next, ", \t\n");
        if (*next)
            *next++ = '\0';
        next += strspn(next, ", \t\n");
        tests[i] = (struct CMUnitTest){name, fns[i], each_setup, each_teardown, NULL};
    }
    int rc = _cmocka_run_group_tests("tests", tests, n, group_setup, group_teardown);
    free(list);
    free(tests);
    return rc;
}

#define SPW_TEST_RUN_(each_setup, each_teardown, group_setup, group_teardown, ...)                 \
    int main(void)                                                                                 \
    {                                                                                              \
        static const CMUnitTestFunction fns[] = {__VA_ARGS__};                                     \
        return spw_test_run(#__VA_ARGS__, fns, sizeof(fns) / sizeof(fns[0]), each_setup,           \
                            each_teardown, group_setup, group_teardown);                           \
    }

#define SPW_TEST_MAIN(...) SPW_TEST_RUN_(NULL, NULL, NULL, NULL, __VA_ARGS__)
#define SPW_TEST_MAIN_EACH(setup, teardown, ...)                                                   \
    SPW_TEST_RUN_(setup, teardown, NULL, NULL, __VA_ARGS__)
#define SPW_TEST_MAIN_GROUP(setup, teardown, ...)                                                  \
    SPW_TEST_RUN_(NULL, NULL, setup, teardown, __VA_ARGS__)

#endif
