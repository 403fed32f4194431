/* One fresh temporary directory per test, as a cmocka setup/teardown pair: test_dir_setup makes
 * test_dir under /tmp, test_dir_teardown removes it with everything in it. Each test program is
 * its own process, so the static state is per program. */
#ifndef SPARROW_TEST_DIR_H
#define SPARROW_TEST_DIR_H

#include <stdio.h>
#include <stdlib.h>

#include "sparrow/fs.h"

static char test_dir[64]; /* "/tmp/spw-test-XXXXXX" */

static int test_dir_setup(void **state)
{
    (void)state;
    snprintf(test_dir, sizeof(test_dir), "/tmp/spw-test-XXXXXX");
    return mkdtemp(test_dir) ? 0 : -1;
}

static int test_dir_teardown(void **state)
{
    (void)state;
    return spw_fs_remove_tree(test_dir) == SPW_OK ? 0 : -1;
}

#endif
