//go:build !unix

package main

import "os/exec"

// ownGroup does nothing where process groups do not exist.
func ownGroup(*exec.Cmd) {}
