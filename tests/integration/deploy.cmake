# deploy/: the Kubernetes manifests and the container image's configuration (issue 8).
# deploy_manifests renders every kustomize overlay, lints it and checks the hardening rules.
spw_integration(deploy_manifests 120)
# deploy_metrics runs every role on loopback, checks each /metrics with promtool and SIGTERM exits.
spw_integration(deploy_metrics 180)
if(TEST deploy_metrics)
    set_tests_properties(deploy_metrics PROPERTIES LABELS "integration;kafka")
endif()
