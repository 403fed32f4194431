# pserver unit tests (white-box: they may include pserver/src's private header).
foreach(_ps_unit ps_optim ps_store ps_checkpoint ps_ckpt_io ps_server ps_steps)
    spw_unit(${_ps_unit} sparrow_pserver)
    if(TARGET test_${_ps_unit})
        target_include_directories(test_${_ps_unit} PRIVATE ${PROJECT_SOURCE_DIR}/pserver/src)
    endif()
endforeach()
