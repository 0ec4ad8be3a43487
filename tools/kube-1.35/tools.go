//go:build tools

// Package tools pins the Kubernetes 1.35.4 control plane that `make e2e` runs,
// and kubectl (the newest minor speaks to every supported server).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
