package redistest

import "syscall"

// sysProcAttr puts the child in its own process group and has the kernel
// SIGKILL it if the test process dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
