//go:build tools

// Package tools pins KWOK (the controller and kwokctl) for `make e2e`.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwokctl"
)
