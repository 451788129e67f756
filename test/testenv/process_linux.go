package testenv

import "syscall"

// sysProcAttr kills the child when the test binary dies, so an aborted test
// run leaves no server behind holding ports and temp dirs.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
