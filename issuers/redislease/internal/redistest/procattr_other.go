//go:build !linux

package redistest

import "syscall"

// procAttr has no death signal to set outside Linux: a server outlives a
// test process that dies without its cleanup.
func procAttr() *syscall.SysProcAttr { return nil }
