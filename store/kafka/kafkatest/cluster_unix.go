//go:build unix

package kafkatest

import (
	"os"
	"syscall"
)

// lockFile takes f's lock, shared or exclusive, waiting for it; closing f
// releases it.
func lockFile(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	return syscall.Flock(int(f.Fd()), how)
}

// alive reports whether process pid exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// sigkill sends SIGKILL to process pid.
func sigkill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
