//go:build tools

// Package tools pins etcd's server for `go build go.etcd.io/etcd/server/v3` (see ../build.sh).
package tools

import _ "go.etcd.io/etcd/server/v3"
