# pserver fuzz targets (white-box: the request path through the server's handlers).
spw_fuzz(ps_request sparrow_pserver)
if(TARGET fuzz_ps_request_replay)
    target_include_directories(fuzz_ps_request_replay PRIVATE ${PROJECT_SOURCE_DIR}/pserver/src)
endif()
if(TARGET fuzz_ps_request)
    target_include_directories(fuzz_ps_request PRIVATE ${PROJECT_SOURCE_DIR}/pserver/src)
endif()
# The shard checkpoint decoders (meta value, rows) behind the checkpoint reader.
spw_fuzz(ps_ckpt_row sparrow_pserver)
