//go:build !unix

package main

import "os/exec"

// killGroup leaves the default cancellation: only the go command is killed.
func killGroup(*exec.Cmd) {}
