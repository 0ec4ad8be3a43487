//go:build tools

// Package tools pins the Crossplane CLI the tests drive (crank render,
// crank beta validate) and the libraries of our own checks beside it
// (./celcheck, ./xrd2crd); the Makefile builds each from the Go module proxy.
// The control plane `make e2e` runs (Crossplane core among it) is pinned
// apart, in tools/crossplane: from v2.3.0 the CLI is not in core's module
// but in github.com/crossplane/cli/v2, which this module does not pin yet.
package tools

import (
	_ "github.com/crossplane/crossplane/v2/cmd/crank"
	_ "github.com/google/cel-go/cel"
	_ "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
)
