# The trainer's PS client against `sparrow pserver` processes: psc_driver pushes and pulls known
# gradients while the scripts kill -9 and restart shards. Each script gets: sparrow binary,
# scratch dir, driver.
if(TARGET sparrow_trainer)
    add_executable(psc_driver ${CMAKE_CURRENT_SOURCE_DIR}/psc_driver.c)
    target_link_libraries(psc_driver PRIVATE sparrow_trainer)
    foreach(_psc_it psc_shard_restart)
        if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${_psc_it}.sh)
            add_test(NAME ${_psc_it}
                     COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/${_psc_it}.sh $<TARGET_FILE:sparrow>
                             ${CMAKE_CURRENT_BINARY_DIR}/${_psc_it}.d $<TARGET_FILE:psc_driver>)
            set_tests_properties(${_psc_it} PROPERTIES TIMEOUT 120 LABELS "integration;psclient")
        endif()
    endforeach()
endif()
