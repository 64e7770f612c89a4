//go:build tools

// Package upstream names the main packages `make upstream` builds, so that
// go.mod and go.sum pin everything they import.
package upstream

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
