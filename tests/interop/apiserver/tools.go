//go:build tools

// Package tools records the main package built from k8s.io/kubernetes, so that
// go mod tidy keeps its dependencies in go.sum.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
