# `sparrow launch` (cmd/launch.c, tools/src/launch.c): the configurable local cluster, its drain and its faults.
if(TARGET sparrow_kafka)
    spw_integration(launch_basic 300)
    # 16 trainers and 16 shards (the scaling study's sizes): about 15 s on 2 cores
    spw_integration(launch_wide 300)
    # sync mode, a trainer killed for good: the Kafka group's session timeout (45 s) comes first
    spw_integration(launch_kill 450)
endif()
