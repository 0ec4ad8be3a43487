//go:build tools

// Package tools pins the Crossplane CLI the tests drive (crank render,
// crank beta validate); `make crank` builds it from the Go module proxy.
package tools

import (
	_ "github.com/crossplane/crossplane/v2/cmd/crank"
	_ "github.com/google/cel-go/cel"
	_ "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
)
