# deploy/: the Kubernetes manifests and the container image's configuration (issue 8).
# deploy_manifests renders every kustomize overlay, lints it and checks the hardening rules.
spw_integration(deploy_manifests 120)
# deploy_metrics runs every role on loopback, checks each /metrics with promtool and SIGTERM exits.
spw_integration(deploy_metrics 180)
if(TEST deploy_metrics)
    set_tests_properties(deploy_metrics PROPERTIES LABELS "integration;kafka")
endif()
# SIGTERM under load, each role within its terminationGracePeriodSeconds and having flushed what
# it owes: pserver (final publish), serve, coordinator, a Kafka trainer (sigterm_roles, driven by
# pserver.cmake's pserver_client) and ingest (sigterm_ingest).
if(TARGET pserver_client AND TARGET sparrow_kafka)
    add_test(NAME sigterm_roles
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sigterm_roles.sh $<TARGET_FILE:sparrow>
                     ${CMAKE_CURRENT_BINARY_DIR}/sigterm_roles.d $<TARGET_FILE:pserver_client>)
    set_tests_properties(sigterm_roles PROPERTIES TIMEOUT 400 LABELS "integration;kafka")
endif()
spw_integration(sigterm_ingest 240)
if(TEST sigterm_ingest)
    set_tests_properties(sigterm_ingest PROPERTIES LABELS "integration;kafka")
endif()
