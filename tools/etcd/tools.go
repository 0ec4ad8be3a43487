//go:build tools

// Package tools pins etcd for `make e2e`.
package tools

import _ "go.etcd.io/etcd/server/v3"
