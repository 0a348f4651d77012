// Package kubetest runs a real kube-apiserver, on an etcd server started in
// the test process, for the k8slease tests.
package kubetest

import (
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/leaderelection"
	_ "github.com/zukhruf/lease/controller"
	_ "go.uber.org/goleak"
)
