//go:build tools

// Package tools pins the Kubernetes 1.35.4 control plane that `make e2e` runs,
// and kubectl (the newest minor speaks to every supported server). The unit
// suite's judges build from this module too (tools/crdcheck, tools/psscheck,
// np-guard's analyzer below): the same Kubernetes code as the API server, and
// its packages compiled once for all of them.
package tools

import (
	_ "github.com/np-guard/netpol-analyzer/cmd/netpolicy"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
