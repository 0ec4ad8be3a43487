//go:build tools

// Package tools pins the analyzer for go build (see go.mod).
package tools

import _ "github.com/np-guard/netpol-analyzer/cmd/netpolicy"
