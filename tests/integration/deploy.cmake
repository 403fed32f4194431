# deploy/: the Kubernetes manifests and the container image's configuration (issue 8).
# deploy_manifests renders every kustomize overlay, lints it and checks the hardening rules.
spw_integration(deploy_manifests 120)
