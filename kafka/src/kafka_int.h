/* Private to kafka/: helpers shared by the consumer, producer and mock files. */
#ifndef SPARROW_KAFKA_INT_H
#define SPARROW_KAFKA_INT_H

#include <librdkafka/rdkafka.h>

#include "sparrow/kafka.h"

/* Routes conf's log lines through sparrow/log.h (librdkafka's own thread calls it). */
void spw_kafka__conf_route_log(rd_kafka_conf_t *conf);

/* Applies every property of props (may be NULL) to conf; on a bad one writes "kafka.<key>:
 * <why>" to errstr and returns SPW_ERR_INVALID. */
spw_err_t spw_kafka__conf_apply(rd_kafka_conf_t *conf, const spw_kafka_props_t *props, char *errstr,
                                size_t errstr_size);

/* Sets one property the wrapper relies on; a failure is a bug in the wrapper. */
spw_err_t spw_kafka__conf_force(rd_kafka_conf_t *conf, const char *key, const char *value,
                                char *errstr, size_t errstr_size);

/* The consumer's librdkafka handle (for transactions: group metadata, positions). */
rd_kafka_t *spw_kafka__consumer_rk(spw_kafka_consumer_t *consumer);

/* Converts a list of spw partitions into a new librdkafka list (caller destroys). */
rd_kafka_topic_partition_list_t *spw_kafka__parts_to_list(const struct spw_kafka_partition *parts,
                                                          size_t n);

#endif
