# coordinator integration tests: `sparrow coordinator` as a process.
spw_integration(coord_cli 60)
# The modes through real processes: sync and ssp bound the clocks, async runs ahead, a trainer
# killed during sync is removed and the other goes on.
if(TARGET sparrow_kafka)
    spw_integration(coord_modes 300)
endif()
# Exactly-once under 10 random kill -9 of trainers, shards and the coordinator (hybrid mode): the
# counter row in the LATEST checkpoint equals the examples produced.
if(TARGET sparrow_kafka AND TARGET sparrow_pserver)
    add_executable(ckpt_counter ${CMAKE_CURRENT_SOURCE_DIR}/ckpt_counter.c)
    target_link_libraries(ckpt_counter PRIVATE sparrow_coordinator sparrow_pserver)
    add_test(NAME coord_exactly_once
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/coord_exactly_once.sh $<TARGET_FILE:sparrow>
                     ${CMAKE_CURRENT_BINARY_DIR}/coord_exactly_once.d $<TARGET_FILE:ckpt_counter>)
    set_tests_properties(coord_exactly_once PROPERTIES TIMEOUT 900 LABELS "integration;kafka")
    foreach(mode sync async)
        add_test(NAME coord_exactly_once_${mode}
                 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/coord_exactly_once.sh
                         $<TARGET_FILE:sparrow> ${CMAKE_CURRENT_BINARY_DIR}/coord_exactly_once_${mode}.d
                         $<TARGET_FILE:ckpt_counter> 24000 random ${mode})
        set_tests_properties(coord_exactly_once_${mode} PROPERTIES TIMEOUT 900
                             LABELS "integration;kafka")
    endforeach()
    # semi-synchronous groups, and sync with a backup worker whose late contributions are dropped
    add_test(NAME coord_exactly_once_group
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/coord_exactly_once.sh $<TARGET_FILE:sparrow>
                     ${CMAKE_CURRENT_BINARY_DIR}/coord_exactly_once_group.d
                     $<TARGET_FILE:ckpt_counter> 24000 random group:2)
    add_test(NAME coord_exactly_once_backup
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/coord_exactly_once.sh $<TARGET_FILE:sparrow>
                     ${CMAKE_CURRENT_BINARY_DIR}/coord_exactly_once_backup.d
                     $<TARGET_FILE:ckpt_counter> 24000 random sync coordinator.sync.backup=1)
    set_tests_properties(coord_exactly_once_group coord_exactly_once_backup PROPERTIES
                         TIMEOUT 900 LABELS "integration;kafka")
    # The contracts of backup workers (late contributions dropped / applied), groups (by index
    # and by speed) and elastic synchronisation (a straggler leaves; a paused trainer leaves and
    # rejoins), read from the coordinator's and the shard's metrics and the counter row.
    add_test(NAME sync_units
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sync_units.sh $<TARGET_FILE:sparrow>
                     ${CMAKE_CURRENT_BINARY_DIR}/sync_units.d $<TARGET_FILE:ckpt_counter>)
    set_tests_properties(sync_units PROPERTIES TIMEOUT 600 LABELS "integration;kafka")
    # sync is synchronous: K = 2, 4 trainers x batch B end with the rows of one trainer of batch
    # K*B (LR and FM, SGD and Adagrad, acc_steps 1 and 2), within 1e-6 relative.
    add_test(NAME sync_equivalence
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sync_equivalence.sh $<TARGET_FILE:sparrow>
                     ${CMAKE_CURRENT_BINARY_DIR}/sync_equivalence.d $<TARGET_FILE:ckpt_counter>)
    set_tests_properties(sync_equivalence PROPERTIES TIMEOUT 600 LABELS integration)
endif()
# Recovery through real processes: a shard killed -9 and restarted after a checkpoint epoch, both
# shards restore it, the trainer seeks back to the manifest's offsets.
if(TARGET sparrow_kafka)
    spw_integration(coord_recovery 120)
endif()
# `sparrow demo` (the whole local pipeline behind `make demo`), short, and its loud failure.
if(TARGET sparrow_kafka)
    spw_integration(demo_smoke 150)
endif()
