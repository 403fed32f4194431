# serve unit tests: the lookup table, the predict request parser, the checkpoint bootstrap.
if(TARGET sparrow_serve)
    spw_unit(serve_table sparrow_serve)
    spw_unit(serve_request sparrow_serve)
    spw_unit(serve_bootstrap sparrow_serve)
endif()
