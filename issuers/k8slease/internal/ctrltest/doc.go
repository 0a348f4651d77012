// Package ctrltest runs the tests and the fault trials of package ctrllease
// (issuers/ctrllease) on the real kube-apiserver of package kubetest:
// a module of its own, never published, that lives beside kubetest so that
// it may import it, and keeps controller-runtime out of k8slease's module.
package ctrltest
