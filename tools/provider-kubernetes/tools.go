//go:build tools

// Package tools pins provider-kubernetes for `make e2e`.
package tools

import _ "github.com/crossplane-contrib/provider-kubernetes/cmd/provider"
