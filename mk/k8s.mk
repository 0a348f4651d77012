# The Kubernetes issuer, in docs/examples/k8slease, a module of its own so
# that the library never depends on client-go. Its tests run a real
# kube-apiserver, built from k8s.io/kubernetes through the module proxy by
# the module in internal/kubetest/apiserver, on an etcd server started in
# the test process. The binary is kept, one for each Kubernetes version, in
# the user's cache folder (zukhruf-lease/kube-apiserver-VERSION; the
# environment variable KUBE_APISERVER names another file): only the first
# build is long (figures in docs/examples/k8slease/internal/kubetest/README.md),
# and a test that finds no binary builds it itself.

K8S_EXAMPLE := docs/examples/k8slease

.PHONY: k8s-apiserver

## k8s-apiserver: build kube-apiserver into the cache unless it is there,
## and print its path.
k8s-apiserver:
	cd $(K8S_EXAMPLE) && $(GO) run ./internal/kubetest/cmd/k8s-apiserver
