// np-guard's NetworkPolicy connectivity analyzer (its k8snetpolicy CLI), the
// judge of what the rendered NetworkPolicies allow. This file only marks the
// module's root: the Makefile builds it with -modfile=../kube-1.NN/go.mod, the
// newest control plane's module, which pins np-guard beside Kubernetes' modules
// so it compiles little beyond its own packages. Its dependency
// github.com/np-guard/models is missing from the checksum database the proxy
// serves: that go.sum holds the hash of the module as the proxy delivered it
// (added with GONOSUMDB=github.com/np-guard), and go build checks against it.
module function-flower/tools/netpolicy

go 1.25.0
