# `sparrow launch` (tools/cmd/launch.c): the configurable local cluster, its drain and its faults.
if(TARGET sparrow_kafka)
    spw_integration(launch_basic 300)
    # sync mode, a trainer killed for good: the Kafka group's session timeout (45 s) comes first
    spw_integration(launch_kill 450)
endif()
