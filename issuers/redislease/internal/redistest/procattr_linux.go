package redistest

import "syscall"

// procAttr has the kernel kill a server when the test process dies, as on
// a test's timeout, which runs no cleanup: a server left behind would slow
// the tests that come next.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
