/* `kafka.*` pass-through properties of a role's configuration into a property list (its own file
 * so that programs without a config table do not link the config module). */
#include "sparrow/kafka.h"

static int add_passthrough(const char *key, const char *value, void *opaque)
{
    return spw_kafka_props_set(opaque, key, value);
}

spw_err_t spw_kafka_props_from_config(spw_kafka_props_t *props, const spw_config_t *cfg)
{
    return spw_config_foreach_passthrough(cfg, "kafka.", add_passthrough, props);
}
