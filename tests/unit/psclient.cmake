# The parameter-server client (white-box: the tests include psclient/src's private
# header for the slicer and the lost-ack hook). test_psc_zmq runs two shards in threads.
foreach(_psc_unit psc_inproc psc_zmq)
    spw_unit(${_psc_unit} sparrow_psclient)
    if(TARGET test_${_psc_unit})
        target_include_directories(test_${_psc_unit} PRIVATE ${PROJECT_SOURCE_DIR}/psclient/src)
        target_link_libraries(test_${_psc_unit} PRIVATE Threads::Threads)
        set_tests_properties(test_${_psc_unit} PROPERTIES LABELS "unit;psclient")
    endif()
endforeach()
