// The Pod Security Standards as the API server's PodSecurity admission judges
// them. This file only marks the module's root: the Makefile builds it with
// -modfile=../kube-1.NN/go.mod, the newest control plane's module, so it runs
// that API server's k8s.io/pod-security-admission, from its compiled packages.
module function-flower/tools/psscheck

go 1.25.0
