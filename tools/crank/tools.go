//go:build tools

// Package tools pins the Crossplane CLI the tests drive (crank render,
// crank beta validate), Crossplane core and crane (a local OCI registry) for
// `make e2e`; the Makefile builds each from the Go module proxy. cert-manager
// (./certmanager, for the e2e's cert-manager examples) lives in this module
// too, at a release on the same Kubernetes libraries as Crossplane's: its
// build reuses the packages Crossplane's compiled.
package tools

import (
	_ "github.com/crossplane/crossplane/v2/cmd/crank"
	_ "github.com/crossplane/crossplane/v2/cmd/crossplane"
	_ "github.com/google/go-containerregistry/cmd/crane"
	_ "github.com/google/cel-go/cel"
	_ "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
)
