# trainer unit tests. White-box ones include trainer/src's private header; test_trn_ref generates
# its data with the tools library (sparrow gen's generator).
foreach(_trn_unit trn_batch trn_model trn_topk trn_pv trn_ref trn_config)
    spw_unit(${_trn_unit} sparrow_trainer sparrow_tools)
    if(TARGET test_${_trn_unit})
        target_include_directories(test_${_trn_unit} PRIVATE ${PROJECT_SOURCE_DIR}/trainer/src)
        set_tests_properties(test_${_trn_unit} PROPERTIES LABELS "unit;trainer")
    endif()
endforeach()
