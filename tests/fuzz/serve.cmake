# serve fuzz targets: the predict request parser (HTTP bodies).
if(TARGET sparrow_serve)
    spw_fuzz(serve_request sparrow_serve)
endif()
