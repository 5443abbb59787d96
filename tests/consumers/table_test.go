package consumers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// tableConsumers are the consumers of docs/DEPENDENCIES.md's table.
var tableConsumers = []consumer{
	{Name: "(a) core + memory", Imports: coreMemory},
	{Name: "(b) + backend/etcd", Imports: []pkgUse{pkgSimba, pkgMemory, pkgEtcd}},
	{Name: "(c) + backend/postgres", Imports: []pkgUse{pkgSimba, pkgMemory, pkgPostgres}},
	{Name: "(d) + backend/kubernetes", Imports: []pkgUse{pkgSimba, pkgMemory, pkgKubernetes}},
	{Name: "(e) fence/sqlfence alone", Imports: []pkgUse{pkgSQLFence}},
	{Name: "(f) + backend/mysql", Imports: []pkgUse{pkgSimba, pkgMemory, pkgMySQL}},
}

// measure is what a consumer pays.
type measure struct {
	Requires, SumLines, BuildList, NonStd, Packages int
	Zips, Mods                                      int
	ZipBytes                                        int64
	Fresh                                           time.Duration
}

// TestConsumersTable prints, for the checkout, the markdown tables of
// docs/DEPENDENCIES.md: what each consumer of tableConsumers pays (on the
// machine's module cache: the requirements of its tidied go.mod, its
// go.sum lines, go list -m all, the packages go list -deps lists; and what
// go mod tidy downloads into an empty module cache), where the pinned
// versions of TestPinnedVersionsStay end, and the size of the root
// module's zip. It runs only under SIMBA_CONSUMERS_TABLE=1 (with -v, to
// see the tables): the fresh downloads take minutes.
func TestConsumersTable(t *testing.T) {
	if os.Getenv(envTable) != "1" {
		t.Skipf("prints docs/DEPENDENCIES.md's tables, downloading tens of MB per consumer: run it with %s=1 go test -count=1 -v -timeout=60m -run TestConsumersTable ./consumers (in tests/)", envTable)
	}
	root := checkoutRoot(t)
	mods := checkoutModules(t, root)
	results := make([]measure, len(tableConsumers))
	pinned := make([][]pinnedResult, len(pinnedCases))
	var zipSize struct {
		Files int
		Bytes int64
		How   string
	}
	t.Run("measure", func(t *testing.T) {
		for i, c := range tableConsumers {
			t.Run(c.Name, func(t *testing.T) {
				t.Parallel()
				results[i] = measureConsumer(t, root, mods, c)
			})
		}
		for i, pc := range pinnedCases {
			t.Run("pinned "+pc.Name, func(t *testing.T) {
				t.Parallel()
				pinned[i] = tidyPinned(t, root, mods, i)
			})
		}
		t.Run("root zip", func(t *testing.T) {
			t.Parallel()
			zipSize.Files, zipSize.Bytes, zipSize.How = rootZip(t, root)
		})
	})
	if t.Failed() {
		return
	}

	// Subtests left out by -run leave their rows and lines out.
	var b strings.Builder
	fmt.Fprintf(&b, "\nCheckout %s at %s, %d module(s), %s.\n", root, describe(t, root), len(mods), goVersion(t))
	head := "\n| consumer | requires | go.sum lines | go list -m all | packages (non-std / all) | fresh tidy: zips | zip MB | .mod files |\n|---|---:|---:|---:|---:|---:|---:|---:|\n"
	for i, c := range tableConsumers {
		m := results[i]
		if m.BuildList == 0 {
			continue
		}
		b.WriteString(head)
		head = ""
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d / %d | %d | %.1f | %d |\n",
			c.Name, m.Requires, m.SumLines, m.BuildList, m.NonStd, m.Packages, m.Zips, float64(m.ZipBytes)/1e6, m.Mods)
	}
	head = "\n| pinned by the consumer of core + memory | after go mod tidy | moved by |\n|---|---|---|\n"
	for _, rs := range pinned {
		for _, r := range rs {
			b.WriteString(head)
			head = ""
			by := "stays"
			if r.After != r.Pinned {
				by = strings.Join(r.MovedBy, ", ")
			}
			fmt.Fprintf(&b, "| %s %s | %s | %s |\n", r.Module, r.Pinned, r.After, by)
		}
	}
	if zipSize.Files > 0 {
		fmt.Fprintf(&b, "\nRoot module zip (golang.org/x/mod/zip.Create of the checkout's files: %s; nested modules left out as the go command leaves them out): %d files, %.2f MB.\n",
			zipSize.How, zipSize.Files, float64(zipSize.Bytes)/1e6)
	}
	fmt.Print(b.String())
}

// measureConsumer tidies c on the machine's module cache and counts what
// it pays, then tidies it again into an empty module cache and counts
// what that downloads.
func measureConsumer(t *testing.T, root string, mods []localModule, c consumer) measure {
	var m measure
	s := writeScratch(t, root, mods, c, goEnv(""))
	s.must(t, "mod", "tidy")
	data, err := os.ReadFile(filepath.Join(s.Dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatalf("parsing the tidied go.mod of %s: %v\n%s", c.Name, err, data)
	}
	m.Requires = len(f.Require)
	if sum, err := os.ReadFile(filepath.Join(s.Dir, "go.sum")); err == nil {
		m.SumLines = len(lines(string(sum)))
	} else if !os.IsNotExist(err) {
		t.Fatal(err)
	}
	m.BuildList = len(s.buildList(t))
	all, nonStd := s.deps(t)
	m.Packages, m.NonStd = len(all), len(nonStd)

	cache := t.TempDir() // -modcacherw: the test can remove it
	fresh := writeScratch(t, root, mods, c, goEnv("-modcacherw", "GOMODCACHE="+cache))
	start := time.Now()
	if _, err := fresh.run(t.Context(), freshTimeout, "mod", "tidy"); err != nil {
		t.Fatalf("fresh go mod tidy of %s: %v", c.Name, err)
	}
	m.Fresh = time.Since(start)
	dl := filepath.Join(cache, "cache", "download")
	err = filepath.WalkDir(dl, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == filepath.Join(dl, "sumdb") {
				return filepath.SkipDir // the checksum database's tiles, no module
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".zip":
			info, err := d.Info()
			if err != nil {
				return err
			}
			m.Zips++
			m.ZipBytes += info.Size()
		case ".mod":
			m.Mods++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("counting the downloads in %s: %v", dl, err)
	}
	t.Logf("%s: %+v", c.Name, m)
	return m
}

// rootZip returns the number of files and the size of the zip the go
// command would make of the checkout's root module: golang.org/x/mod/zip's
// Create (which leaves out nested modules, vendor directories and what a
// module zip may not hold) over the files git lists as tracked or
// untracked and not ignored; in a directory that is no git checkout (a
// copy of those files), over every file but build/.
func rootZip(t testing.TB, root string) (files int, size int64, how string) {
	t.Helper()
	names, how := checkoutFiles(t, root)
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var list []zip.File
	seen := map[string]bool{}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		info, err := os.Lstat(filepath.Join(root, name))
		if os.IsNotExist(err) {
			continue // tracked, deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, diskFile{root: root, name: name, info: info})
	}
	m := module.Version{Path: modfile.ModulePath(data), Version: "v0.0.0-00010101000000-000000000000"}
	cf, err := zip.CheckFiles(list)
	if err != nil {
		t.Fatalf("checking the root module's files: %v", err)
	}
	var w countWriter
	if err := zip.Create(&w, m, list); err != nil {
		t.Fatalf("zipping the root module of %s: %v", root, err)
	}
	return len(cf.Valid), w.n, how
}

// checkoutFiles returns the files of the checkout at root, slash-separated
// and relative to it: git ls-files -co --exclude-standard, or, when root is
// no git checkout, every regular file outside build/ and .git; and which
// of the two it did.
func checkoutFiles(t testing.TB, root string) ([]string, string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		var names []string
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if d.IsDir() && (rel == "build" || d.Name() == ".git") {
				return filepath.SkipDir
			}
			if d.Type().IsRegular() {
				names = append(names, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("listing the files of %s: %v", root, err)
		}
		return names, "every file of the directory but build/ (no git checkout)"
	}
	ctx, cancel := context.WithTimeout(t.Context(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", "-C", root, "ls-files", "-z", "-co", "--exclude-standard")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v\n%s", root, err, stderr.String())
	}
	var names []string
	for _, name := range strings.Split(string(out), "\x00") {
		if name != "" {
			names = append(names, name)
		}
	}
	return names, "git ls-files -co --exclude-standard"
}

// diskFile is a file of the checkout, for zip.Create.
type diskFile struct {
	root, name string
	info       fs.FileInfo
}

func (f diskFile) Path() string                { return f.name }
func (f diskFile) Lstat() (fs.FileInfo, error) { return f.info, nil }
func (f diskFile) Open() (io.ReadCloser, error) {
	return os.Open(filepath.Join(f.root, f.name))
}

// countWriter counts what is written to it.
type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

// describe says which commit the checkout is at and whether its working
// tree differs from it.
func describe(t testing.TB, root string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cmdTimeout)
	defer cancel()
	rev, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "an unknown commit (" + err.Error() + ")"
	}
	st, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output()
	d := "commit " + strings.TrimSpace(string(rev))
	if err == nil && len(bytes.TrimSpace(st)) > 0 {
		d += " with changes in its working tree"
	}
	return d
}

// goVersion returns the go command's version.
func goVersion(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin(t), "env", "GOVERSION").Output()
	if err != nil {
		return "go (version unknown)"
	}
	return strings.TrimSpace(string(out))
}
