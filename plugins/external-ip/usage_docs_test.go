package main

import (
	"os"
	"strings"
	"testing"
)

// docs/kubernetes.md shows the node commands' usage to scripts that rely
// on the names: it must be the binary's, flag for flag.
func TestTheKubernetesDocShowsTheNodeCommandsUsage(t *testing.T) {
	data, err := os.ReadFile("../../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), "## The installer's commands")
	_, block, ok2 := strings.Cut(after, "```\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal(`docs/kubernetes.md: no code block under "## The installer's commands"`)
	}
	if got, want := squeeze(block), squeeze(nodeCommands); got != want {
		t.Errorf("docs/kubernetes.md shows the usage\n%s\nthe binary's is\n%s", got, want)
	}
}

// squeeze is text with each run of white space made one space: the usage's
// indentation differs between the binary's help and the doc.
func squeeze(text string) string { return strings.Join(strings.Fields(text), " ") }
