// The API server's CRD validation. This file only marks the module's root: each
// build names its pins with -modfile (see the Makefile): a minor the e2e runs
// uses that control plane's module (tools/kube-1.NN/go.mod), so the validator
// judges with the very apiextensions-apiserver the API server runs; every
// other supported minor pins its own in go.1.NN.mod.
module function-flower/tools/crdcheck

go 1.25.0
