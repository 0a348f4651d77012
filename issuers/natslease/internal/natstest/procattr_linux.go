package natstest

import "syscall"

// procAttr has the kernel kill a server when the test process dies, as on
// a test's timeout, which runs no cleanup.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
