# tools integration tests. eval_cli: a shard trained by a file-input trainer, checkpointed on
# request (pserver_client) and completed with a MANIFEST + LATEST (eval_manifest), then scored
# by `sparrow eval` on a held-out tail.
if(TARGET sparrow_tools AND TARGET pserver_client AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/eval_cli.sh)
    add_executable(eval_manifest ${CMAKE_CURRENT_SOURCE_DIR}/eval_manifest.c)
    target_link_libraries(eval_manifest PRIVATE sparrow_coordinator sparrow_pserver)
    add_test(NAME eval_cli
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/eval_cli.sh $<TARGET_FILE:sparrow>
                     ${CMAKE_CURRENT_BINARY_DIR}/eval_cli.d $<TARGET_FILE:pserver_client>
                     $<TARGET_FILE:eval_manifest>)
    set_tests_properties(eval_cli PROPERTIES TIMEOUT 180 LABELS integration)
endif()
