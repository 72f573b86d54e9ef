//go:build tools

// Package tools records the main packages built from other modules
// (kube-apiserver, etcdctl, and kubeadm and kubectl for the deployment and
// migration tests), so that go mod tidy keeps their dependencies in go.sum.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
