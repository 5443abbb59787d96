package simba_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readmeBlock is one ```go block of README.md.
type readmeBlock struct {
	line int    // the README line of the block's first line of code
	code string // the block's code, without the fences
}

// readmeBlocks returns the ```go blocks of the markdown file at path, or an
// error for a block that is not closed.
func readmeBlocks(path string) ([]readmeBlock, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var (
		blocks []readmeBlock
		cur    *readmeBlock
		code   strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &readmeBlock{line: n + 1}
			code.Reset()
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.code = code.String()
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			code.WriteString(line)
			code.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a ```go block is not closed", path, cur.line-1)
	}
	return blocks, nil
}

// TestREADMEGoBlocks builds every ```go block of README.md as it is written:
// each block is a whole program (package clause, imports, declarations) that
// a user can paste and run, so a name that is renamed or removed, a missing
// import or an unused variable fails here with the block's README line. The
// blocks are built as packages of this module through a build overlay
// (nothing is written into the tree), and must be gofmt-formatted.
func TestREADMEGoBlocks(t *testing.T) {
	blocks, err := readmeBlocks("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go block: the test would check nothing")
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	replace := map[string]string{}
	var pkgs []string
	for i, b := range blocks {
		if !strings.HasPrefix(b.code, "package ") && !strings.Contains(b.code, "\npackage ") {
			t.Errorf("README.md:%d: the ```go block has no package clause; write it as a whole program", b.line)
			continue
		}
		if formatted, err := format.Source([]byte(b.code)); err != nil {
			t.Errorf("README.md:%d: the ```go block does not parse: %v", b.line, err)
			continue
		} else if !bytes.Equal(formatted, []byte(b.code)) {
			t.Errorf("README.md:%d: the ```go block is not gofmt-formatted; gofmt gives:\n%s", b.line, formatted)
		}
		// The line directive makes the compiler report README.md's lines.
		file := filepath.Join(tmp, fmt.Sprintf("block%d.go", i))
		src := fmt.Sprintf("//line README.md:%d\n%s", b.line, b.code)
		if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		dir := fmt.Sprintf("internal/readmeblock/line%d", b.line)
		replace[filepath.Join(root, dir, "main.go")] = file
		pkgs = append(pkgs, "./"+dir)
	}
	if len(pkgs) == 0 {
		return
	}
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	// go build of several packages compiles them and discards the result.
	// (go vet cannot be used: it runs in each package's directory, which
	// the overlay does not create.)
	cmd := exec.Command("go", append([]string{"build", "-overlay", overlayFile}, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go build of README.md's ```go blocks failed (%v); the lines are README.md's:\n%s", err, out)
	}
}
