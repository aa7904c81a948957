//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// ownGroup puts cmd's process in a process group of its own, so that a
// terminal's Ctrl-C reaches only this program, which then decides what the
// child gets (crash-test kills its writer).
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
