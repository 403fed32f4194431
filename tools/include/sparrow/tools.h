/* tools: the synthetic click stream generator (`sparrow gen`). */
#ifndef SPARROW_TOOLS_H
#define SPARROW_TOOLS_H

#include <stddef.h>

#include "sparrow/config.h"

/* The property table of `sparrow gen` (gen.*). */
extern const struct spw_config_prop spw_gen_config_props[];
extern const size_t spw_gen_config_n_props;

#endif
