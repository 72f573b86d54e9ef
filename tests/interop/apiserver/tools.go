//go:build tools

// Package tools records the main packages built from other modules
// (kube-apiserver, etcdctl), so that go mod tidy keeps their dependencies in
// go.sum.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
