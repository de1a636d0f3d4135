package main

import (
	"fmt"
	"io"
)

// runCLI serves a person at the terminal.
func runCLI(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintf(stderr, "usage: external-ip status [--json]\n")
	return 2
}
