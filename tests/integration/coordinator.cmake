# coordinator integration tests: `sparrow coordinator` as a process.
spw_integration(coord_cli 60)
# coord_modes.sh (the coordinator wired into real trainers and shards) takes about 90 s: run by
# hand until trainers keep polling Kafka while held at a barrier.
# Recovery through real processes: a shard killed -9 and restarted after a checkpoint epoch, both
# shards restore it, the trainer seeks back to the manifest's offsets.
if(TARGET sparrow_kafka)
    spw_integration(coord_recovery 120)
endif()
# `sparrow demo` (the whole local pipeline behind `make demo`), short, and its loud failure.
if(TARGET sparrow_kafka)
    spw_integration(demo_smoke 150)
endif()
