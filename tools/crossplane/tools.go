//go:build tools

// Package tools pins the control plane `make e2e` runs: Crossplane core, crane
// (a local OCI registry) and cert-manager (./certmanager, for the e2e's
// cert-manager examples); hack/e2e/build-tools.sh builds each from the Go
// module proxy. cert-manager sits beside Crossplane at a release on the same
// Kubernetes libraries, so its build reuses the packages Crossplane's compiled.
//
// Crossplane core is pinned apart from the CLI (tools/crank): from v2.3.0 the
// CLI is no longer in this module, and before v2.4.0 core registered one watch
// per composed resource instead of one per kind (docs/operations.md, Crossplane's
// circuit breaker), which every composed resource's event then counted several times.
package tools

import (
	_ "github.com/crossplane/crossplane/v2/cmd/crossplane"
	_ "github.com/google/go-containerregistry/cmd/crane"
)
