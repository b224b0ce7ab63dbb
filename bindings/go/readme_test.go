package kuragate

import (
	"os"
	"strings"
	"testing"
)

// The README's Go example is the body of Example (example_test.go), which
// go test compiles and runs.
func TestTheReadmeShowsTheExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Use the gate from your orchestrator")
	if !ok {
		t.Fatal("README lacks the section")
	}
	_, block, ok := strings.Cut(section, "```go\n")
	if !ok {
		t.Fatal("README section has no Go block")
	}
	block, _, _ = strings.Cut(block, "```")
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if !strings.Contains(norm(string(example)), norm(block)) {
		t.Fatalf("README's Go block is not in example_test.go:\n%s", block)
	}
}
