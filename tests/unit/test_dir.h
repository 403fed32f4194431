/* One fresh temporary directory per test, as a cmocka setup/teardown pair: test_dir_setup makes
 * test_dir under /tmp, test_dir_teardown removes it with everything in it (test_fixture_* the same
 * for a test that also keeps a counter). Each test program is
 * its own process, so the static state is per program. */
#ifndef SPARROW_TEST_DIR_H
#define SPARROW_TEST_DIR_H

#include <stdio.h>
#include <stdlib.h>

#include "sparrow/fs.h"

static char test_dir[64]; /* "/tmp/spw-test-XXXXXX" */

static inline int test_dir_setup(void **state)
{
    (void)state;
    snprintf(test_dir, sizeof(test_dir), "/tmp/spw-test-XXXXXX");
    return mkdtemp(test_dir) ? 0 : -1;
}

static inline int test_dir_teardown(void **state)
{
    (void)state;
    return spw_fs_remove_tree(test_dir) == SPW_OK ? 0 : -1;
}

/* The same for tests that keep state: *state is a test_dir_fixture, its directory fresh for each
 * test and n_db counting the names a test makes in it ("db0", "db1", ...). */
struct test_dir_fixture {
    char dir[64];
    int n_db;
};

static inline int test_fixture_setup(void **state)
{
    struct test_dir_fixture *fx = calloc(1, sizeof(*fx));
    if (!fx)
        return -1;
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/spw-test-XXXXXX");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    *state = fx;
    return 0;
}

static inline int test_fixture_teardown(void **state)
{
    struct test_dir_fixture *fx = *state;
    spw_err_t rc = spw_fs_remove_tree(fx->dir);
    free(fx);
    return rc == SPW_OK ? 0 : -1;
}

#endif
